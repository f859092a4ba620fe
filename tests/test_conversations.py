"""Multi-turn conversations through the service (issue: multi-turn conversations): follow-ups on
earlier files, chat-log context in the prompts, ordering, restart safety, retention."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from bot.settings import load_settings
from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from tests.conftest import media_file, start_caption_in_chat
from bot.errors import InputError, StorageError
from pipeline.types import Done

MEDIA = Path(__file__).parent / "fixtures" / "media"




def key(thread: str) -> ConversationKey:
    return ConversationKey("test", "workspace", "channel", thread)


@pytest.fixture(params=["sqlite", "postgres"])
async def service(sandbox, tmp_path, request):
    """The service on each store: the conversation behaviour is the same on SQLite and PostgreSQL."""
    overrides = sandbox.overrides(tmp_path / "data")
    if request.param == "postgres":
        overrides["storage"]["database_url"] = request.getfixturevalue("postgres_url")
    s = await Service.create(load_settings(env={}, overrides=overrides))
    yield s
    await s.close()


async def turn(service, text, files=(), thread="t1"):
    events = [e async for e in service.handle(Message(text, list(files), key=key(thread), who=Requester("terminal", "u1")))]
    assert isinstance(events[-1], Done)
    return events[-1].record


async def test_follow_up_edits_an_earlier_generated_image(service, sandbox):
    first = await turn(service, "Generate an image of a cat on a red sofa")
    [generated] = first.files
    assert generated.id == "image-1" and generated.origin == "task:0"
    second = await turn(service, "now make that image black and white")
    [task] = second.tasks
    assert task.task == "image-to-image" and task.args["image"] == "image-1"
    [edited] = second.files
    assert edited.id == "image-2"
    im = Image.open(edited.path).convert("RGB")
    assert im.size == Image.open(generated.path).size
    r, g, b = im.split()
    assert r.tobytes() == g.tobytes() == b.tobytes()  # really black and white
    # the planner saw the earlier turn in its chat log
    planning = [r for r in sandbox.controller.requests if r.stage == "task-planning"][-1]
    prompt = planning.body["messages"][-1]["content"]
    assert "<chat_log>" in prompt and "cat on a red sofa" in prompt and "image-1" in prompt


async def test_follow_up_refers_to_a_file_from_two_turns_back(service):
    await turn(service, "Describe this picture", [media_file("chelsea.png")])
    await turn(service, "Describe this picture", [media_file("rocket.jpg")])
    third = await turn(service, "Detect the objects in the first photo")
    [task] = third.tasks
    assert task.task == "object-detection" and task.args["image"] == "image-1"
    [annotated] = third.files
    assert Image.open(annotated.path).size == (451, 300)  # chelsea, not the rocket (427x640)


async def test_resource_of_another_thread_is_refused(service):
    await turn(service, "Describe this picture", [media_file("chelsea.png")], thread="a")
    with pytest.raises(InputError) as e:
        await turn(service, "Detect the objects in image-1", thread="b")
    assert e.value.user_message == "There is no image-1 in this conversation (it has no image yet)."
    with pytest.raises(InputError, match="it has image-1"):
        await turn(service, "Detect the objects in image-4", thread="a")


async def test_history_survives_a_restart(sandbox, tmp_path):
    settings = load_settings(env={}, overrides=sandbox.overrides(tmp_path / "data"))
    s1 = await Service.create(settings)
    await turn(s1, "Describe this picture", [media_file("coffee.png")])
    conv = await s1.conversation_id(key("t1"))
    await s1.close()
    s2 = await Service.create(settings)
    try:
        assert await s2.conversation_id(key("t1")) == conv
        record = await turn(s2, "Detect the objects in this photo")
        assert record.tasks[0].args["image"] == "image-1"
        assert Image.open(record.files[0].path).size == (600, 400)
        turns = await s2.store.turns(conv)
        assert [t["status"] for t in turns] == ["ok", "ok"]
    finally:
        await s2.close()


async def test_turns_of_one_thread_run_in_order_and_threads_do_not_wait(service, sandbox):
    sandbox.inference.latency["image-to-text"] = 0.6
    await asyncio.gather(
        turn(service, "Caption this picture", [media_file("chelsea.png")], thread="x"),
        turn(service, "Caption this picture", [media_file("rocket.jpg")], thread="y"),
    )
    captions = [r for r in sandbox.inference.records if r.task == "image-to-text"]
    # different threads never wait for each other: their expert calls overlapped
    assert len(captions) == 2 and captions[0].start < captions[1].end and captions[1].start < captions[0].end

    sandbox.inference.records.clear()
    sandbox.controller.requests.clear()
    await asyncio.gather(
        turn(service, "Caption this picture", [media_file("coffee.png")], thread="z"),
        turn(service, "Caption the first photo again", thread="z"),
    )
    reqs = sandbox.controller.requests
    first_done = [r.end for r in reqs if r.stage == "response-generation"][0]
    second_plan = [r.start for r in reqs if r.stage == "task-planning"][1]
    assert second_plan >= first_done  # the second message waited for the first


async def test_forget_and_prune(service, tmp_path):
    await turn(service, "Describe this picture", [media_file("astronaut.png")], thread="old")
    await turn(service, "Describe this picture", [media_file("camera.png")], thread="new")
    old = await service.conversation_id(key("old"))
    old_files = [r.path for r in await service.store.resources(old)]
    assert await service.store.forget(old)
    assert await service.store.resources(old) == []
    assert not any(p.exists() for p in old_files)
    new = await service.conversation_id(key("new"))
    assert all(r.path.exists() for r in await service.store.resources(new))
    report = await service.store.prune(max_age_days=None, max_media_bytes=0)
    # a conversation used in the last 10 minutes is never pruned, even over the quota
    assert report.conversations == 0 and all(r.path.exists() for r in await service.store.resources(new))


async def test_corrupt_database_is_named(sandbox, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "conversations.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError) as e:
        await Service.create(load_settings(env={}, overrides=sandbox.overrides(data)))
    assert "conversations.sqlite3" in e.value.user_message


def _cli(args, cwd, stdin="", timeout=120, slow=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(cwd / "data")
    code = "import sys; from hugginggpt import main; sys.exit(main(sys.argv[1:]))"
    if slow:  # make the stand-in captioner slow, so the run can be killed mid-way
        code = (
            "import sys; import sandbox; orig = sandbox.Sandbox.__init__\n"
            "def slow(self, **kw):\n    orig(self, latency={'image-to-text': 60})\n"
            "sandbox.Sandbox.__init__ = slow\nfrom hugginggpt import main; sys.exit(main(sys.argv[1:]))"
        )
    return [sys.executable, "-c", code, *args], env


def test_chat_resumes_after_sigkill_mid_run(tmp_path):
    cmd, env = _cli(["chat", "--sandbox"], tmp_path, slow=True)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, conv = start_caption_in_chat(proc, MEDIA / "chelsea.png")
    assert conv and "running on" in seen, seen + proc.stderr.read() if proc.poll() is not None else seen
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    cmd, env = _cli(["chat", "--sandbox", "--conversation", conv], tmp_path)
    p = subprocess.run(cmd, cwd=tmp_path, env=env, input="/files\nDetect the objects in this photo\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert f"Resuming conversation {conv}: 1 earlier turns, 1 files." in p.stdout
    assert "(failed)" in p.stdout  # the killed turn is marked failed
    assert "image-1 (image, user): image chelsea.png" in p.stdout  # its file is intact
    assert "[0] object-detection  image='image-1'" in p.stdout and "Files:" in p.stdout


def test_store_commands(tmp_path):
    cmd, env = _cli(["store", "forget", "nosuchid"], tmp_path)
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "There is no conversation nosuchid." in p.stderr
    cmd, env = _cli(["store", "prune"], tmp_path)
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "max_age_days" in p.stderr
    cmd, env = _cli(["store", "prune", "--max-age-days", "30"], tmp_path)
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("Removed 0 conversations")


@pytest.fixture
async def two_services(sandbox, tmp_path, service):
    """A second service on the same store as ``service`` (what a second process sees)."""
    other = await Service.create(service.settings)
    yield service, other
    await other.close()


async def test_a_threads_turns_keep_their_order_across_processes(two_services, sandbox):
    a, b = two_services
    sandbox.inference.latency["image-to-text"] = 0.5
    first = asyncio.create_task(turn(a, "Caption this picture", [media_file("coffee.png")], thread="shared"))
    conv = await a.conversation_id(key("shared"))

    async def photo_stored() -> None:  # A's turn has begun and stored its photo; its caption runs 0.5 s
        while not await a.store.resources(conv):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(photo_stored(), 20)
    # the first turn is running in process A when the follow-up reaches process B
    second = await turn(b, "Caption the first photo again", thread="shared")
    await first
    reqs = sandbox.controller.requests
    first_done = [r.end for r in reqs if r.stage == "response-generation"][0]
    second_plan = [r.start for r in reqs if r.stage == "task-planning"][1]
    assert second_plan >= first_done  # B waited for A's turn, then planned with it
    assert second.status == "ok" and "image-1" in json.dumps(second.to_json())


async def test_admission_budget_is_shared_by_processes(two_services):
    from bot.admission import Admission
    from bot.incoming import Requester

    a, b = two_services
    settings = a.settings.model_copy(update={"discord": a.settings.discord.model_copy(
        update={"rate_limit_per_minute": 3, "max_concurrent_runs": 1})})
    adm_a, adm_b = Admission(settings, "discord", a.store), Admission(settings, "discord", b.store)
    who = Requester("discord", "U1", channels=("1",), workspace="9")
    assert await adm_a.admit(who) is None
    refusal = await adm_b.admit(who)  # the user's one run slot is taken in the other process
    assert refusal is not None and refusal.reason == "concurrency"
    adm_a.release(who)
    await asyncio.sleep(0.1)
    assert await adm_b.admit(who) is None
    adm_b.release(who)
    await asyncio.sleep(0.1)
    assert await adm_a.admit(who) is None  # third request this minute
    adm_a.release(who)
    await asyncio.sleep(0.1)
    refusal = await adm_b.admit(who)
    assert refusal is not None and refusal.reason == "rate" and "3 per minute" in refusal.sentence
