"""The chat bots keep answering while the conversation store fails (a full disk: a small tmpfs the
test mounts and fills): the turn runs without memory of the conversation, the thread is told once
while the failure lasts, an answer whose save fails still arrives, and once the disk has room again
turns are stored and remembered."""

from __future__ import annotations

import contextlib
import io
import logging
import sqlite3
from pathlib import Path

import pytest

from bot.degraded import KeepOrFail, ScratchSpace, ToldThreads
from bot.errors import InputError, StorageError
from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from pipeline.errors import ExpertError
from pipeline.types import Done, Notice
from tests.conftest import MEDIA_DIR as MEDIA, media_file
from tests.test_storage_faults import fill, small_disk, tracebacks

WITHOUT_MEMORY = ("The server's storage is full, so I can't use or remember this conversation right now; "
                  "I'll still answer this message on its own.")
UNSAVED = "The server's storage is full, so this answer could not be saved and I won't remember it later in this thread."


def fill_up(disk: Path) -> Path:
    """Fill ``disk`` so that the next write of the conversation database fails: its write-ahead
    log is emptied first (SQLite reuses a log's old pages, which would still take a small write
    on a full disk), then every free byte is taken. Returns the filler (delete it to free the disk)."""
    with contextlib.closing(sqlite3.connect(disk / "data" / "conversations.sqlite3")) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return fill(disk)


@contextlib.asynccontextmanager
async def service_on(sandbox, disk: Path):
    service = await Service.create(load_settings(env={}, overrides=sandbox.overrides(disk / "data")))
    try:
        yield service
    finally:
        await service.close()


async def turn(service: Service, text: str, files=(), *, thread: str = "t1", on_start=None) -> tuple[list[str], Done]:
    """One bot turn: the notices the thread sees, and the final event."""
    key = ConversationKey("slack", "T1", "C1", thread)
    events = [e async for e in service.handle(Message(text, list(files), key=key, who=Requester("terminal", "U1"), on_start=on_start, memoryless_fallback=True))]
    assert isinstance(events[-1], Done), events
    return [e.text for e in events if isinstance(e, Notice)], events[-1]


async def test_full_disk_answers_without_memory_tells_once_then_remembers_again(sandbox, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with small_disk(tmp_path / "disk") as disk:
        async with service_on(sandbox, disk) as service:
            filler = fill_up(disk)
            notes, done = await turn(service, "Detect the objects in this photo", [media_file("chelsea.png")])
            assert notes == [WITHOUT_MEMORY] and done.record.notes[0] == WITHOUT_MEMORY
            assert done.record.answered and done.record.response
            [boxes] = done.record.files  # the photo with boxes drawn, kept for the front end to post
            assert boxes.path.read_bytes()[:4] == b"\x89PNG" and not boxes.path.is_relative_to(disk)
            notes, done = await turn(service, "Generate an image of a cat on a red sofa")
            assert notes == [] and done.record.answered and len(done.record.files) == 1  # told once only
            assert done.record.conversation_id is None  # nothing was stored
            lines = [r.getMessage() for r in caplog.records if r.name == "bot.service"]
            assert len(lines) == 2 and all("failed at get_or_create" in m and "disk is full" in m for m in lines)

            filler.unlink()  # the operator frees space
            notes, done = await turn(service, "Say hello")
            assert notes == [] and done.record.conversation_id is not None
            conv = done.record.conversation_id
            assert [t["user_text"] for t in await service.store.turns(conv)] == ["Say hello"]
            notes, done = await turn(service, "What did I ask you before?")
            planning = [r for r in sandbox.controller.requests if r.stage == "task-planning"][-1]
            assert "Say hello" in planning.body["messages"][-1]["content"]  # the stored turn is in the chat log

            filler = fill_up(disk)  # full again: told again
            notes, done = await turn(service, "Say hello again")
            assert notes == [WITHOUT_MEMORY] and done.record.answered
            filler.unlink()
    assert tracebacks(caplog) == []


async def test_answer_whose_save_fails_arrives_and_is_saved_when_room_comes_back(sandbox, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with small_disk(tmp_path / "disk") as disk:
        async with service_on(sandbox, disk) as service:
            fillers: list[Path] = []
            notes, done = await turn(service, "Say hello", on_start=lambda conv, n: fillers.append(fill_up(disk)))
            assert notes == [UNSAVED] and done.record.answered and "Say hello" in done.record.response
            saves = [r for r in caplog.records if "could not save turn" in r.getMessage()]
            assert len(saves) == 1 and saves[0].exc_info is None
            conv = done.record.conversation_id

            notes, done = await turn(service, "Tell me a joke")  # still full: answered, not told again
            assert notes == [] and done.record.answered and done.record.conversation_id is None

            fillers[0].unlink()
            notes, done = await turn(service, "What did I ask you first?")
            assert notes == [] and done.record.conversation_id == conv
            stored = await service.store.turns(conv)
            assert [(t["user_text"], t["status"]) for t in stored] == [("Say hello", "ok"),
                                                                       ("What did I ask you first?", "ok")]
            planning = [r for r in sandbox.controller.requests if r.stage == "task-planning"][-1]
            assert "Say hello" in planning.body["messages"][-1]["content"]
    assert tracebacks(caplog) == []


async def test_an_output_that_cannot_be_stored_fails_its_task_and_the_answer_still_comes(sandbox, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with small_disk(tmp_path / "disk") as disk:
        async with service_on(sandbox, disk) as service:
            fillers: list[Path] = []
            notes, done = await turn(service, "Generate an image of a cat on a red sofa",
                                     on_start=lambda conv, n: fillers.append(fill_up(disk)))
            [result] = done.record.results.values()
            assert result.status == "failed" and result.error.startswith("The server's storage is full")
            assert "could not be kept" in result.error and str(disk) not in result.error
            assert done.record.answered and done.record.response and notes == [UNSAVED]
            fillers[0].unlink()
    assert tracebacks(caplog) == []


async def test_request_naming_an_earlier_file_says_the_thread_cannot_be_reached(sandbox, tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        async with service_on(sandbox, disk) as service:
            filler = fill_up(disk)
            with pytest.raises(InputError) as e:
                await turn(service, "Detect the objects in image-1")
            assert e.value.user_message.startswith("The server's storage is full, so I can't use the earlier messages")
            assert str(disk) not in e.value.user_message
            filler.unlink()


async def test_http_keeps_raising_storage_errors(sandbox, tmp_path):
    """Without ``storage_fallback`` (the HTTP API answers 503 storage_unavailable) nothing changes."""
    with small_disk(tmp_path / "disk") as disk:
        async with service_on(sandbox, disk) as service:
            filler = fill_up(disk)
            key = ConversationKey("http", "w", "c", "t")
            with pytest.raises(StorageError):
                [e async for e in service.handle(Message("Say hello", key=key))]
            filler.unlink()


async def test_scratch_space_keeps_within_its_budget_and_removes_everything_at_close(tmp_path):
    space = ScratchSpace(tmp_path, budget=3000, keep=3600)
    first = space.sink()
    a = await first.add(b"a" * 2000, kind="text", mime="text/plain", origin="user", description="a")
    second = space.sink()
    b = await second.add(b"b" * 2000, kind="text", mime="text/plain", origin="user", description="b")
    assert not a.path.exists() and b.path.read_bytes() == b"b" * 2000  # the oldest turn made room
    with pytest.raises(StorageError):
        await second.add(b"c" * 2000, kind="text", mime="text/plain", origin="user", description="c")
    with pytest.raises(ExpertError) as e:  # an output: its task fails, the run goes on
        await KeepOrFail(second).add(b"c" * 2000, kind="text", mime="text/plain", origin="task:0", description="c")
    assert e.value.reason == "too_large" and "could not be kept" in e.value.user_message
    await space.close()
    assert list(tmp_path.iterdir()) == []


def test_a_thread_is_told_once_until_forgotten():
    told = ToldThreads(maxsize=2, ttl=60)
    assert told.first_time("a") and not told.first_time("a")
    told.forget("a")
    assert told.first_time("a")


@pytest.mark.parametrize("streaming", [True, False])
async def test_slack_thread_is_told_once_and_answered_while_the_disk_is_full(slack, tmp_path, caplog, streaming):
    from benchmarks.harness.slack import start_harness

    from sandbox import Sandbox

    caplog.set_level(logging.INFO)
    with small_disk(tmp_path / "disk") as disk:
        async with Sandbox() as sb, service_on(sb, disk) as service:
            h = await start_harness(slack, service, tmp_path, streaming=streaming)
            try:
                filler = fill_up(disk)
                app_mention, _, ts = h.mention("say hello")
                assert (await h.deliver(app_mention))[0] == 200
                await h.settle()
                follow_up, _, _ = h.mention("now tell me a joke", thread_ts=ts)
                assert (await h.deliver(follow_up))[0] == 200
                await h.settle()
                replies = h.replies(ts)
                told = [m for m in replies if "storage is full" in m.text]
                assert len(told) == 1 and "I'll still answer this message on its own" in told[0].text, \
                    [m.text for m in replies]
                assert str(disk) not in " ".join(m.text for m in replies)
                answers = [m for m in replies if "Sandbox stand-in controller" in m.text]
                assert len(answers) == 2, [m.text for m in replies]  # both turns answered
                filler.unlink()
            finally:
                await h.close()
    assert tracebacks(caplog) == []


async def test_discord_thread_is_told_once_and_gets_its_images_while_the_disk_is_full(tmp_path, caplog):
    from PIL import Image

    from tests.test_discord_bot import running_bot

    caplog.set_level(logging.INFO)
    with small_disk(tmp_path / "disk") as disk:
        async with running_bot(disk) as env:  # the bot's data directory is on the small disk

            async def finished(thread: int, runs: int) -> list:
                def done() -> list | None:  # a status message starts with its notes, then the plan line
                    msgs = env.d.bot_messages(thread)
                    ended = [m for m in msgs if "🧭" in m.text and ("🏁 Finished" in m.text or "⚠️" in m.text)]
                    return msgs if len(ended) >= runs and env.bot.runs_in_flight == 0 else None
                return await env.d.wait_for(done, 30)

            filler = fill_up(disk)
            iid = await env.ask("Generate an image of a red rocket")
            thread_id = await env.thread_of(iid)
            await finished(thread_id, 1)
            await env.d.send_message("Make this photo black and white", channel_id=thread_id, files=["coffee.png"])
            msgs = await finished(thread_id, 2)
            statuses = [m for m in msgs if "🧭" in m.text]
            assert len(statuses) == 2 and sum("storage is full" in m.text for m in statuses) == 1, \
                [m.text for m in statuses]
            assert "I'll still answer this message on its own" in statuses[0].text and str(disk) not in statuses[0].text
            assert all("🏁 Finished" in m.text for m in statuses)
            images = [m for m in msgs if m.files]
            assert len(images) == 2  # the generated image, then the photo made black and white
            with Image.open(io.BytesIO(images[1].files[0].data)) as gray, Image.open(MEDIA / "coffee.png") as orig:
                r, g, b = gray.convert("RGB").split()
                assert gray.size == orig.size and r.tobytes() == g.tobytes() == b.tobytes()
            filler.unlink()
    assert tracebacks(caplog) == []


def test_terminal_chat_keeps_answering_when_the_disk_fills(tmp_path):
    import pexpect

    from tests.test_chat_terminal import PROMPT, _env, screen_text, spawn

    with small_disk(tmp_path / "disk") as disk:
        chat = spawn(tmp_path, "--sandbox", env=_env(disk))  # the data directory on the small disk
        chat.expect(PROMPT)
        filler = fill_up(disk)
        chat.send("hello\r")
        chat.expect("storage is full, so I can't use or remember this conversation")
        chat.expect("Sandbox stand-in")
        chat.expect(PROMPT)
        chat.send("hello again\r")
        chat.expect("Sandbox stand-in")
        seen = chat.before
        chat.expect(PROMPT)
        assert "hello again" in screen_text(seen) and "storage is full" not in screen_text(seen + chat.before)  # once
        filler.unlink()
        chat.send("/quit\r")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0 and "Traceback" not in (chat.before or "")


async def test_a_store_that_cannot_open_on_a_full_disk_says_the_disk_is_full(tmp_path):
    from bot.store import MediaStore, open_store

    with small_disk(tmp_path / "disk") as disk:
        settings = load_settings(env={}, overrides={"storage": {"data_dir": str(disk / "data")}})
        store = await open_store(settings.storage, MediaStore(settings.storage.data_dir))  # made while there is room
        await store.close()
        fill_up(disk)
        with pytest.raises(StorageError) as info:
            await open_store(settings.storage, MediaStore(settings.storage.data_dir))
        assert info.value.user_message.endswith("the disk is full.")
