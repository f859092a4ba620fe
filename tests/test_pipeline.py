"""The four stages end to end: the real openai and huggingface_hub clients over HTTP against the
sandbox stand-ins, on real media. Assertions are on what a user gets: plans, statuses, decoded
files, answer text, error sentences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from bot.settings import load_settings
from bot.incoming import Accepted, IncomingFile, Message
from bot.service import Service
from tests.conftest import media_file
from hugginggpt.common import record_exit_status
from bot.errors import InputError
from pipeline.types import Done, ModelSelected, PlanReady, ResponseDelta, TaskFailed, TaskFinished, TaskPlanned, TaskSkipped, TaskStarted

MEDIA = Path(__file__).parent / "fixtures" / "media"




@pytest.fixture
async def make_service(sandbox, tmp_path):
    services = []

    async def make(**sections):
        overrides = sandbox.overrides(tmp_path / "data")
        for section, values in sections.items():
            overrides.setdefault(section, {}).update(values)
        service = await Service.create(load_settings(env={}, overrides=overrides))
        services.append(service)
        return service

    yield make
    for s in services:
        await s.close()


async def run(service, text, files=()):
    events = [e async for e in service.handle(Message(text, list(files)))]
    assert isinstance(events[-1], Done)
    return events, events[-1].record


def plan_script(tasks):
    return {"content": json.dumps({"tasks": tasks})}


async def test_describe_a_photo_end_to_end(make_service):
    service = await make_service()
    events, record = await run(service, "Describe this picture in as much detail as you can", [media_file("chelsea.png")])
    assert record.status == "ok", record.error
    assert {t.task for t in record.tasks} == {"image-to-text", "object-detection", "image-classification"}
    assert all(r.status == "ok" for r in record.results.values())
    # events arrive in a sensible order: each task is announced (TaskPlanned while the plan streams,
    # or in PlanReady) before its selection → start → finish; the answer comes last
    kinds = [type(e) for e in events]
    assert kinds[0] is Accepted and kinds[1] in (PlanReady, TaskPlanned) and kinds.count(TaskFinished) == 3 and ResponseDelta in kinds
    assert PlanReady in kinds and kinds.index(ResponseDelta) > max(i for i, k in enumerate(kinds) if k is TaskFinished)
    for tid in (0, 1, 2):
        idx = [i for i, e in enumerate(events) if not isinstance(e, TaskPlanned) and getattr(e, "task_id", None) == tid or getattr(getattr(e, "selection", None), "task_id", None) == tid or getattr(getattr(e, "result", None), "task_id", None) == tid]
        types = [type(events[i]) for i in idx]
        assert types[0] is ModelSelected and TaskStarted in types and types[-1] is TaskFinished
    # the annotated image is a real image of the same size as the photo, with boxes drawn on it
    [annotated] = record.files
    out = Image.open(annotated.path).convert("RGB")
    src = Image.open(MEDIA / "chelsea.png").convert("RGB")
    assert out.size == src.size and out.tobytes() != src.tobytes()
    assert "Sandbox stand-in" in record.response
    assert record.llm_calls == 1 + 3 + 1  # planning, one selection per task (several candidates), response


async def test_chain_text_image_audio_passes_resources(make_service, sandbox):
    sandbox.controller.script.append(
        plan_script(
            [
                {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a red bicycle"}},
                {"task": "image-to-text", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
                {"task": "text-to-speech", "id": 2, "dep": [1], "args": {"text": "Here is the caption: <resource>-1"}},
            ]
        )
    )
    service = await make_service(inference={"selection": "top"})
    _, record = await run(service, "Draw a red bicycle, caption it and read the caption aloud")
    assert record.status == "ok" and [r.status for r in record.results.values()] == ["ok"] * 3
    image = record.results[0].output.files[0]
    caption = record.results[1].output.text
    assert Image.open(image.path).size == (512, 512)
    assert "512x512" in caption  # the captioner saw the generated image, not something else
    audio = record.results[2].output.files[0]
    assert audio.kind == "audio" and audio.size > 1000
    assert [f.id for f in record.files] == [image.id, audio.id]


async def test_independent_tasks_overlap_and_dependents_start_when_their_own_producer_ends(make_service, sandbox):
    # 0 (slow) is independent; 2 depends only on 1 (fast): 2 must start before 0 ends.
    sandbox.inference.latency.update({"object-detection": 0.8, "image-to-text": 0.1, "text-to-speech": 0.1})
    sandbox.controller.script.append(
        plan_script(
            [
                {"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
                {"task": "image-to-text", "id": 1, "dep": [-1], "args": {"image": "image-1"}},
                {"task": "text-to-speech", "id": 2, "dep": [1], "args": {"text": "<resource>-1"}},
            ]
        )
    )
    service = await make_service(inference={"selection": "top"})
    _, record = await run(service, "detect, caption and speak", [media_file("coffee.png")])
    assert record.status == "ok"
    rec = {r.task: r for r in sandbox.inference.records}
    det, cap, tts = rec["object-detection"], rec["image-to-text"], rec["text-to-speech"]
    assert det.start < cap.end and cap.start < det.end  # overlap
    assert tts.start >= cap.end  # after its producer
    assert tts.start < det.end  # not level by level
    assert tts.start - cap.end < 0.25  # and promptly


async def test_failed_dependency_skips_dependents_with_reason(make_service, sandbox):
    sandbox.controller.script.append(
        plan_script(
            [
                {"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
                {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}},
            ]
        )
    )
    # no re-planning round here: what follows a failure is tested in tests/test_replanning.py
    service = await make_service(inference={"selection": "top", "max_candidates_tried": 2}, planning={"max_replans": 0})
    for card in service.pipeline.selector.catalog.candidates("image-to-text"):
        sandbox.inference.gone.add(card.id)
    events, record = await run(service, "caption and read", [media_file("rocket.jpg")])
    assert record.results[0].status == "failed" and "tried 2 models" in record.results[0].error
    assert record.results[1].status == "skipped" and "Task 0, whose output it needs" in record.results[1].error
    assert any(isinstance(e, TaskFailed) for e in events) and any(isinstance(e, TaskSkipped) for e in events)
    assert record.status == "partial" and record.response  # the user still gets an answer saying what failed


async def test_gone_model_is_replaced_by_next_candidate(make_service, sandbox):
    service = await make_service(inference={"selection": "top"})
    top = service.pipeline.selector.catalog.candidates("object-detection")
    sandbox.inference.gone.add(top[0].id)
    sandbox.controller.script.append(plan_script([{"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]))
    _, record = await run(service, "find objects", [media_file("astronaut.png")])
    r = record.results[0]
    assert r.status == "ok" and r.attempts == [top[0].id, top[1].id] and r.model == top[1].id


async def test_loading_model_503_is_retried(make_service, sandbox):
    service = await make_service(inference={"selection": "top"})
    top = service.pipeline.selector.catalog.candidates("image-classification")[0]
    sandbox.inference.faults[top.id] = [503, 429]
    sandbox.controller.script.append(plan_script([{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]))
    _, record = await run(service, "what is it", [media_file("chelsea.png")])
    assert record.results[0].status == "ok" and record.results[0].model == top.id
    assert [r.status for r in sandbox.inference.records] == [503, 429, 200]


async def test_task_timeout_fails_the_task_cleanly(make_service, sandbox):
    sandbox.inference.latency["image-to-text"] = 5
    sandbox.controller.script.append(plan_script([{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]))
    service = await make_service(inference={"selection": "top", "task_timeout": 0.3, "max_attempts": 1, "max_candidates_tried": 1})
    _, record = await run(service, "caption", [media_file("chelsea.png")])
    assert record.results[0].status == "failed"
    assert "0.3 seconds" in record.results[0].error or "did not answer" in record.results[0].error


async def test_overall_deadline(make_service, sandbox):
    sandbox.inference.latency["image-to-text"] = 5
    sandbox.controller.script.append(plan_script([{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]))
    service = await make_service(inference={"selection": "top", "deadline": 0.4})
    _, record = await run(service, "caption", [media_file("chelsea.png")])
    assert record.results[0].status == "failed" and "deadline of 0.4 seconds" in record.results[0].error


async def test_controller_serves_text_tasks_itself(make_service, sandbox):
    sandbox.controller.script.append(
        plan_script([{"task": "summarization", "id": 0, "dep": [-1], "args": {"text": "Cats sleep a lot. They also purr."}}])
    )
    service = await make_service()
    _, record = await run(service, "summarize: Cats sleep a lot. They also purr.")
    assert record.selections[0].strategy == "controller" and record.results[0].status == "ok"
    assert "Cats sleep a lot" in record.results[0].output.text
    assert sandbox.inference.records == []


async def test_empty_plan_means_direct_answer(make_service, sandbox):
    service = await make_service()
    events, record = await run(service, "Hello there!")
    assert record.tasks == [] and record.status == "ok" and record.response
    assert sandbox.inference.records == []
    assert [s.stage for s in sandbox.controller.requests] == ["task-planning", "response-generation"]


async def test_garbage_plan_gets_one_repair_round(make_service, sandbox):
    sandbox.controller.script.append({"content": "Sure! I would love to help you with that."})
    service = await make_service()
    _, record = await run(service, "Describe this picture", [media_file("chelsea.png")])
    assert record.status == "ok" and record.tasks
    planning = [r for r in sandbox.controller.requests if r.stage == "task-planning"]
    assert len(planning) == 2 and "<problem>" in planning[1].body["messages"][-1]["content"]


async def test_plan_still_invalid_after_repair_is_refused(make_service, sandbox):
    hostile = plan_script([{"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "/etc/passwd"}}])
    sandbox.controller.script += [hostile, hostile]
    service = await make_service()
    _, record = await run(service, "Describe this picture", [media_file("chelsea.png")])
    assert record.status == "error" and record_exit_status(record) == 5
    assert "valid plan" in record.error and "/etc/passwd" in record.error
    assert sandbox.inference.records == []  # nothing was run


async def test_truncated_plan_is_repaired_locally(make_service, sandbox):
    sandbox.controller.script.append({"content": '{"tasks": [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"'})
    service = await make_service()
    _, record = await run(service, "caption this", [media_file("chelsea.png")])
    assert record.status == "ok" and [t.task for t in record.tasks] == ["image-to-text"]
    assert len([r for r in sandbox.controller.requests if r.stage == "task-planning"]) == 1


async def test_server_without_json_schema_falls_back(make_service, sandbox):
    sandbox.controller.accept_json_schema = False
    service = await make_service()
    _, record = await run(service, "Describe this picture", [media_file("chelsea.png")])
    assert record.status == "ok" and record.tasks


@pytest.mark.parametrize(
    "script, expected, code",
    [
        ({"status": 401, "message": "bad key"}, "refused the API key", 4),
        ({"status": 429, "message": "slow down"}, "rate-limiting", 4),
        ({"status": 500, "message": "boom"}, "HTTP 500", 4),
        ({"drop": True}, "cannot be reached", 4),
    ],
)
async def test_controller_failures_are_one_sentence(make_service, sandbox, script, expected, code):
    sandbox.controller.script.append(script)
    service = await make_service()
    _, record = await run(service, "Describe this picture", [media_file("chelsea.png")])
    assert record.status == "error" and expected in record.error and record_exit_status(record) == code
    assert "sandbox" not in record.error.lower() or "127.0.0.1" in record.error


async def test_controller_timeout(make_service, sandbox):
    sandbox.controller.script.append({"delay": 3})
    service = await make_service(llm={"timeout": 0.5})
    _, record = await run(service, "Describe this picture", [media_file("chelsea.png")])
    assert record.status == "error" and "did not answer within 0.5 seconds" in record.error


@pytest.mark.parametrize(
    "file, message",
    [
        (IncomingFile(b"", name="empty.png"), "empty"),
        (IncomingFile(b"<html><body>Sign in</body></html>", name="photo.png"), ""),
        (IncomingFile((MEDIA / "speech_weather.wav").read_bytes(), name="photo.png", declared_mime="image/png"), ""),
        (IncomingFile((MEDIA / "chelsea.png").read_bytes()[:5000], name="cut.png"), ""),
    ],
)
async def test_bad_files_are_refused_before_anything_runs(make_service, sandbox, file, message):
    service = await make_service()
    with pytest.raises(InputError) as e:
        await run(service, "Describe this picture", [file])
    assert e.value.user_message and message in e.value.user_message
    assert sandbox.controller.requests == [] and sandbox.inference.records == []
    assert not list((Path(service.settings.storage.data_dir) / "media").rglob("*.*"))


async def test_oversized_file(make_service):
    service = await make_service(storage={"max_file_bytes": 100_000})
    with pytest.raises(InputError) as e:
        await run(service, "Describe", [media_file("chelsea.png")])
    assert "MiB" in e.value.user_message


async def test_real_taskbench_requests_run_end_to_end(make_service, sandbox):
    """Real user requests (TaskBench, Hugging Face tools): every one ends in an answer or one
    clear sentence; every planned task ran on a real stand-in call or failed with a reason."""
    lines = (Path(__file__).parent / "fixtures" / "taskbench" / "data_huggingface_requests.jsonl").read_text().splitlines()
    service = await make_service(inference={"selection": "top"})
    photo, speech, video = media_file("rocket.jpg"), media_file("speech_weather.wav"), media_file("rocket_zoom.mp4")
    planned = 0
    for line in lines[:25]:
        text = json.loads(line)["user_request"]
        files = ([photo] if any(x in text for x in (".jpg", ".png")) else []) + ([speech] if any(x in text for x in (".wav", ".mp3", ".flac")) else [])
        files += [video] if ".mp4" in text and "create" not in text.lower() else []
        try:
            _, record = await run(service, text, files)
        except InputError as e:  # a file it relies on is not there: one sentence, before any LLM call
            assert "attach" in e.user_message, (text, e.user_message)
            continue
        if not record.answered:  # the stand-in found no task: it says so in one sentence, exit status 5
            assert record_exit_status(record) == 5 and "offline stand-in controller" in record.error, (text, record.error)
            continue
        assert record.response.strip()
        planned += bool(record.tasks)
        for t in record.tasks:
            r = record.results[t.id]
            assert r.status == "ok" or r.error, (text, t)
    assert planned >= 15


async def test_storage_full_while_saving_an_output_is_a_storage_error_not_the_models(make_service, sandbox):
    from bot.errors import StorageError

    sandbox.controller.script.append(plan_script([
        {"task": "image-to-image", "id": 0, "dep": [-1], "args": {"image": "image-1", "text": "make it look like a painting"}},
    ]))
    service = await make_service(inference={"selection": "top"}, storage={"max_media_bytes": 1 << 20})
    _, record = await run(service, "make it look like a painting", [media_file("astronaut.png")])  # 791 kB of 1 MiB
    assert record.status == "error" and isinstance(record.failure, StorageError), record.error
    assert record_exit_status(record) == 8
    assert "full" in record.error and "could not be read" not in record.error
    assert len([r for r in sandbox.inference.records if r.task == "image-to-image"]) == 1  # no other model was tried
