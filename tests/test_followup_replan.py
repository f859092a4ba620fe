"""A follow-up that corrects the previous turn ("that's not what I meant, use the other photo") is
planned with what that turn ran: the chat log carries its tasks, files and results, so the planner
repeats the work on the other file instead of guessing."""

from __future__ import annotations

from pathlib import Path

from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from pipeline.followup import work_summary
from pipeline.types import Done
from tests.conftest import media_file


async def _turn(service, text, files=()):
    key = ConversationKey("test", "workspace", "channel", "t1")
    events = [e async for e in service.handle(Message(text, list(files), key=key, who=Requester("terminal", "u1")))]
    assert isinstance(events[-1], Done)
    return events[-1].record


async def test_use_the_other_photo_replans_the_previous_work_on_the_other_file(sandbox, tmp_path: Path):
    service = await Service.create(load_settings(env={}, overrides=sandbox.overrides(tmp_path / "data")))
    try:
        first = await _turn(service, "Describe this photo", [media_file("chelsea.png"), media_file("rocket.jpg")])
        [(task, args)] = [(t.task, t.args) for t in first.tasks]
        assert task == "image-to-text" and args["image"] in ("image-1", "image-2")
        used = args["image"]
        other = "image-1" if used == "image-2" else "image-2"
        second = await _turn(service, "That's not what I meant, use the other photo")
    finally:
        await service.close()
    assert [(t.task, t.args) for t in second.tasks] == [("image-to-text", {"image": other})]
    assert second.status == "ok"
    caption_1, caption_2 = first.results[0].output.text, second.results[0].output.text
    assert caption_1 != caption_2 and caption_2 in second.response  # the answer is about the other photo
    # what the planner read: the earlier turn's tasks, file and result in its chat log
    planning = [r for r in sandbox.controller.requests if r.stage == "task-planning"][-1]
    prompt = planning.body["messages"][-1]["content"]
    assert f'[turn 0] tasks run: task 0 image-to-text {{"image": "{used}"}} ok: ' + caption_1[:40] in prompt


def test_the_work_summary_of_a_record_names_tasks_files_results_and_failures():
    record = {
        "tasks": [{"task": "object-detection", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
                  {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<resource>-0 " + "x" * 200}}],
        "results": {"0": {"status": "ok", "output": {"text": None, "files": [{"id": "image-3"}]}, "error": None},
                    "1": {"status": "failed", "output": None, "error": "text-to-speech failed: gone."}},
    }
    line = work_summary(record)
    assert line.startswith('task 0 object-detection {"image": "image-1"} ok: image-3; task 1 text-to-speech {"text": "<resource>-0 xx')
    assert line.endswith("…\"} failed: text-to-speech failed: gone.")
    assert work_summary({"tasks": [], "results": {}}) == ""
