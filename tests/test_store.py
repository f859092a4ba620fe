"""Conversation store (issue 3, storage half): SQLite or PostgreSQL + media directory behind one
protocol. Tests taking the ``store``/``new_store`` fixtures are the shared contract: they run on
both backends (PostgreSQL: a real throwaway server, benchmarks/harness/realparts.py).

Real media from tests/fixtures/media; real subprocess for the crash test.
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import text as sql_text

from bot.errors import StorageError
from bot.incoming import ConversationKey
from bot.locks import ThreadLocks
from bot.store import ConversationStore, MediaStore, PruneReport
from bot.tokens import TURN_OVERHEAD_TOKENS, select_history
from bot.store.lease import RECENT_SECONDS
from bot.store.sql.database import DB_NAME, Database
from bot.store.sql.revisions import HEAD
from bot.store.sql.store import SQLStore
from bot.store.retention import expired, over_budget
from bot.store.text import clip_summary
from bot.tokens import count_json_tokens, count_tokens
from pipeline.tasks.outputs import Label, Labels
from pipeline.types import Output, Resource, RunRecord, Selection, Task, TaskResult

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT / "tests" / "fixtures" / "media"

KEY_A = ConversationKey("discord", "guild-1", "chan-1", "thread-1")
KEY_B = ConversationKey("slack", "T01", "C01", "1700000000.000100")


def media(name: str) -> bytes:
    return (MEDIA / name).read_bytes()


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sqlite_at(data_dir: Path, media: object, *, busy_timeout: float = 5.0, **kw) -> SQLStore:
    """The store on the SQLite file of ``data_dir`` (as ``open_store`` makes it without a database URL)."""
    return SQLStore(Database(path=Path(data_dir).resolve() / DB_NAME, busy_timeout=busy_timeout), data_dir, media, **kw)


def make_store(tmp_path: Path, **kw) -> SQLStore:
    return sqlite_at(tmp_path / "data", MediaStore(tmp_path / "data"), **kw)


async def q(s: SQLStore, sql: str) -> list[tuple]:
    """Rows of a read-only statement on the store's database."""
    return [tuple(r) for r in await s.database.read("testing", sql_text(sql))]


async def on_writer(s: SQLStore, sql: str) -> None:
    """Run ``sql`` on the store's (one) SQLite writer connection."""
    async with s.database.tx("testing") as conn:
        await conn.run_sync(lambda c: c.exec_driver_sql(sql))


def record(text: str, answer: str, files: list[Resource] = (), status: str = "ok", error: str | None = None) -> RunRecord:
    task = Task(0, "object-detection", (), {"image": "image-1"})
    sel = Selection(0, "facebook/detr-resnet-50", "most downloaded detector", ("facebook/detr-resnet-50",), "single")
    res = TaskResult(0, "ok", Output(text="2 cats", files=list(files), data=Labels((Label("cat", 0.9), Label("cat", 0.8)))),
                     model="facebook/detr-resnet-50", attempts=["facebook/detr-resnet-50"], started=1.0, finished=2.5)
    return RunRecord(text, [task], {0: sel}, {0: res}, answer, list(files), 2,
                     {"plan": 812.0, "select": 3.2, "execute": 1500.4, "respond": 640.0}, status, error)


@pytest.fixture
async def sqlite_store(tmp_path):
    """A SQLite store, for tests of SQLite's own failures."""
    s = make_store(tmp_path)
    await s.open()
    yield s
    await s.close()


@pytest.fixture
async def store(new_store):
    s = new_store()
    await s.open()
    yield s
    await s.close()


async def run_turn(s: SQLStore, cid: str, text: str, upload: str | None = None, answer: str = "Done."):
    turn = await s.begin_turn(cid, text, "U1")
    files = []
    if upload:
        mime = {"png": "image/png", "jpg": "image/jpeg", "wav": "audio/wav", "mp4": "video/mp4"}[upload.rsplit(".", 1)[1]]
        kind = mime.split("/")[0]
        files.append(await s.add_resource(cid, turn, media(upload), kind=kind, mime=mime, origin="user",
                                          description=f"{kind} {upload}", name=upload))
    await s.finish_turn(cid, turn, record(text, answer))
    return turn, files


# ----------------------------------------------------------------------------------------------


async def test_many_reads_at_once_all_finish(store):
    """More reads at once than the store has read threads, of both kinds (the chat log's, and any
    other), all finish: no read waits for a pooled connection that is never given back."""
    cid = await store.get_or_create(KEY_A)
    await run_turn(store, cid, "Caption this", upload="chelsea.png")
    many = ([store.context(cid, 1500) for _ in range(12)] + [store.turns(cid) for _ in range(12)]
            + [store.find(cid) for _ in range(12)])
    results = await asyncio.wait_for(asyncio.gather(*many), 20)
    assert all(history[0].user_text == "Caption this" for history, _ in results[:12])
    assert all(turns[0]["user_text"] == "Caption this" for turns in results[12:24])
    assert results[24:] == [KEY_A] * 12


def test_the_store_has_every_protocol_method_with_its_signature():
    """SQLStore must offer each method of the four protocols with the same parameters (a structural
    check: isinstance on a runtime-checkable Protocol only tests that the names exist), and the
    protocols together are ConversationStore, with no attribute a caller would write."""
    import inspect

    from bot.store import Conversations, Deliveries, SharedLimits, Upkeep

    parts = (Conversations, Deliveries, SharedLimits, Upkeep)
    names = [n for p in parts for n, v in vars(p).items() if callable(v) and not n.startswith("_")]
    assert len(names) == len(set(names)) == 24  # files_of (GET /v1/files) joined the conversations protocol
    assert {"get_or_create", "begin_turn", "finish_turn", "add_resource", "context", "prune", "forget"} <= set(names)
    assert set(ConversationStore.__mro__) >= set(parts)
    assert not any(getattr(p, "__annotations__", {}) for p in (ConversationStore, *parts))  # no callbacks
    for name in names:
        want = inspect.signature(getattr(ConversationStore, name))
        got = inspect.signature(getattr(SQLStore, name))
        assert list(got.parameters) == list(want.parameters), name
        assert inspect.iscoroutinefunction(getattr(SQLStore, name)) == inspect.iscoroutinefunction(
            getattr(ConversationStore, name)), name


async def test_create_reopen_keeps_history_and_files(tmp_path):
    s = make_store(tmp_path)
    await s.open()
    cid = await s.get_or_create(KEY_A)
    assert cid == await s.get_or_create(KEY_A)
    assert len(cid) <= 12
    t0 = await s.begin_turn(cid, "What is in chelsea.png?", "U1")
    photo = await s.add_resource(cid, t0, media("chelsea.png"), kind="image", mime="image/png", origin="user",
                                 description="photo chelsea.png,\n451x300 pixels", name="chelsea.png")
    boxes = Image.open(io.BytesIO(media("chelsea.png"))).convert("L")
    buf = io.BytesIO()
    boxes.save(buf, "PNG")
    made = await s.sink(cid, t0).add(buf.getvalue(), kind="image", mime="image/png", origin="task:0",
                                     description="grey version")
    await s.finish_turn(cid, t0, record("What is in chelsea.png?", "A cat lying on a couch.", [made]))
    await s.close()

    s2 = make_store(tmp_path)
    await s2.open()
    assert await s2.get_or_create(KEY_A) == cid
    assert await s2.find(cid) == KEY_A
    assert await s2.find("nope") is None
    res = await s2.resources(cid)
    assert [(r.id, r.origin, r.turn, r.name) for r in res] == [("image-1", "user", 0, "chelsea.png"), ("image-2", "task:0", 0, None)]
    assert res[0].description == "photo chelsea.png, 451x300 pixels"
    assert (res[0].path, res[0].size) == (photo.path, photo.size)  # the upload survives a reopen
    assert res[0].path.read_bytes() == media("chelsea.png")  # the file itself is intact
    with Image.open(res[1].path) as im:
        assert im.mode == "L" and im.size == (451, 300)
    turns = await s2.turns(cid)
    assert len(turns) == 1 and turns[0]["status"] == "ok" and turns[0]["user"] == "U1"
    assert turns[0]["answer"] == "A cat lying on a couch."
    rec = turns[0]["record"]
    assert rec["selections"]["0"]["model"] == "facebook/detr-resnet-50"
    assert rec["timings_ms"]["execute"] == 1500.4
    assert rec["files"][0]["id"] == "image-2"
    assert [r["id"] for r in turns[0]["resources"]] == ["image-1", "image-2"]
    # the conversation continues where it was
    assert await s2.begin_turn(cid, "and now?", None) == 1
    await s2.close()


async def test_resource_ids_stable_and_private_to_their_conversation(store):
    a = await store.get_or_create(KEY_A)
    b = await store.get_or_create(KEY_B)
    assert a != b
    ta = await store.begin_turn(a, "two photos and a sound", None)
    ids = []
    for name, kind, mime in [("chelsea.png", "image", "image/png"), ("speech_weather.wav", "audio", "audio/wav"),
                             ("rocket.jpg", "image", "image/jpeg"), ("rocket_zoom.mp4", "video", "video/mp4")]:
        ids.append((await store.add_resource(a, ta, media(name), kind=kind, mime=mime, origin="user",
                                             description=name, name=name)).id)
    assert ids == ["image-1", "audio-1", "image-2", "video-1"]
    tb = await store.begin_turn(b, "same photo elsewhere", None)
    rb = await store.add_resource(b, tb, media("chelsea.png"), kind="image", mime="image/png", origin="user",
                                  description="chelsea again")
    assert rb.id == "image-1"  # numbering is per conversation
    assert [r.id for r in await store.resources(b)] == ["image-1"]
    assert all(r.description != "chelsea again" for r in await store.resources(a))
    _, res_b = await store.context(b, 10_000)
    assert [r.description for r in res_b] == ["chelsea again"]
    # concurrent generated files in one turn still get distinct ids
    sink = store.sink(a, ta)
    made = await asyncio.gather(*[
        sink.add(media(n), kind="image", mime="image/png", origin=f"task:{i}", description=n)
        for i, n in enumerate(["astronaut.png", "coffee.png", "text.png", "camera.png"])
    ])
    assert sorted(r.id for r in made) == ["image-3", "image-4", "image-5", "image-6"]
    assert [r.id for r in await store.resources(a)][:4] == ids  # earlier ids unchanged


async def test_context_newest_first_within_budget(store):
    cid = await store.get_or_create(KEY_A)
    long_answer = "The image shows a tabby cat lying on a blue couch. " * 30
    texts = [json.loads(line)["user_request"] for line in
             (ROOT / "tests/fixtures/taskbench/data_huggingface_requests.jsonl").read_text().splitlines()[:6]]
    for i, text in enumerate(texts):
        await run_turn(store, cid, text, "chelsea.png" if i == 2 else None, answer=long_answer)
    current = await store.begin_turn(cid, "now the current request", None)

    history, resources = await store.context(cid, 100_000)
    assert [t.index for t in history] == [5, 4, 3, 2, 1, 0]  # newest first, running turn left out
    assert current not in [t.index for t in history]
    assert history[0].user_text == texts[5]
    assert len(history[0].answer) <= 300 and history[0].answer.endswith("…")
    assert history[3].resources[0].id == "image-1" and resources[0].id == "image-1"

    cost_one = count_tokens(texts[5]) + count_tokens(history[0].answer)
    few, resources_few = await store.context(cid, 2 * cost_one + 40)
    assert 1 <= len(few) < 6
    assert [t.index for t in few] == list(range(5, 5 - len(few), -1))  # contiguous newest turns
    assert [r.id for r in resources_few] == ["image-1"]  # all resources regardless of budget
    none, _ = await store.context(cid, 0)
    assert none == []


async def test_migrates_v1_database_and_keeps_data(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "media").mkdir()
    photo = data / "media" / "chelsea.png"
    photo.write_bytes(media("chelsea.png"))
    db = sqlite3.connect(data / "conversations.sqlite3")
    db.executescript(textwrap.dedent("""
        CREATE TABLE conversations (id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, created REAL NOT NULL);
        CREATE TABLE turns (conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL, user_text TEXT NOT NULL, answer TEXT NOT NULL DEFAULT '', status TEXT NOT NULL,
            created REAL NOT NULL, PRIMARY KEY (conversation_id, idx));
        CREATE TABLE resources (conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            id TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL, mime TEXT NOT NULL, size INTEGER NOT NULL,
            origin TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', turn INTEGER,
            PRIMARY KEY (conversation_id, id));
        INSERT INTO conversations VALUES ('c0ffee', 'discord:guild-1:chan-1:thread-1', 1000.0);
        INSERT INTO turns VALUES ('c0ffee', 0, 'Describe chelsea.png', 'A tabby cat on a couch.', 'ok', 1001.0);
        INSERT INTO turns VALUES ('c0ffee', 1, 'Make it grey', '', 'running', 1002.0);
        INSERT INTO resources VALUES ('c0ffee', 'image-1', 'image', 'media/chelsea.png', 'image/png', 200, 'user',
            'photo chelsea.png', 0);
        PRAGMA user_version = 1;
    """))
    db.commit()
    db.close()

    s = sqlite_at(data, MediaStore(data))
    await s.open()
    try:
        assert await q(s, "SELECT (SELECT user_version FROM pragma_user_version), version_num FROM alembic_version") == [
            (5, HEAD)]
        assert await s.get_or_create(KEY_A) == "c0ffee"
        assert await s.find("c0ffee") == KEY_A
        assert await s.mark_interrupted() == 1
        history, res = await s.context("c0ffee", 10_000)
        assert [(t.index, t.status, t.answer) for t in history] == [(1, "failed", ""), (0, "ok", "A tabby cat on a couch.")]
        assert res[0].path == photo and res[0].path.read_bytes() == media("chelsea.png")
        t = await s.begin_turn("c0ffee", "and one more photo", None)
        new = await s.add_resource("c0ffee", t, media("rocket.jpg"), kind="image", mime="image/jpeg", origin="user",
                                   description="rocket")
        assert (t, new.id) == (2, "image-2")  # numbering continues after the migrated id
    finally:
        await s.close()


async def test_corrupt_database_file_is_a_storage_error_naming_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    db_file = data / "conversations.sqlite3"
    db_file.write_bytes(os.urandom(8192))
    s = sqlite_at(data, MediaStore(data))
    with pytest.raises(StorageError) as e:
        await s.open()
    assert str(db_file) in e.value.user_message
    assert "corrupt" in e.value.user_message
    assert "Traceback" not in str(e.value)
    assert e.value.__cause__ is None and e.value.__suppress_context__


async def test_damaged_pages_inside_a_valid_file_are_a_storage_error(tmp_path):
    s = make_store(tmp_path)
    await s.open()
    cid = await s.get_or_create(KEY_A)
    for i in range(30):
        await s.begin_turn(cid, f"request {i} " * 50, None)
    await s.close()
    raw = bytearray(s.path.read_bytes())
    assert not s.path.with_name(s.path.name + "-wal").exists() or s.path.with_name(s.path.name + "-wal").stat().st_size == 0
    raw[4096:] = os.urandom(len(raw) - 4096)  # keep the header and schema page, scramble the rest
    s.path.write_bytes(bytes(raw))
    s2 = make_store(tmp_path)
    with pytest.raises(StorageError) as e:
        await s2.open()
        try:
            await s2.turns(cid)
        finally:
            await s2.close()
    assert str(s.path) in e.value.user_message and "corrupt" in e.value.user_message


async def test_newer_schema_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    db = sqlite3.connect(data / "conversations.sqlite3")
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StorageError, match="newer version"):
        await sqlite_at(data, MediaStore(data)).open()


async def test_foreign_sqlite_file_is_refused_untouched(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    db = sqlite3.connect(data / "conversations.sqlite3")
    db.execute("CREATE TABLE invoices (n INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="another program"):
        await sqlite_at(data, MediaStore(data)).open()
    db = sqlite3.connect(data / "conversations.sqlite3")
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["invoices"]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()


async def test_locked_database_at_open(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    db_file = data / "conversations.sqlite3"
    holder = sqlite3.connect(db_file, isolation_level=None)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        s = sqlite_at(data, MediaStore(data), busy_timeout=0.2)
        t0 = time.monotonic()
        with pytest.raises(StorageError) as e:
            await s.open()
        assert time.monotonic() - t0 >= 0.15  # it waited the busy timeout first
        assert str(db_file) in e.value.user_message and "locked" in e.value.user_message
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_locked_database_during_a_turn_then_recovers(tmp_path):
    s = make_store(tmp_path, busy_timeout=0.2)
    await s.open()
    try:
        cid = await s.get_or_create(KEY_A)
        holder = sqlite3.connect(s.path, isolation_level=None, timeout=0.1)
        holder.execute("BEGIN IMMEDIATE")  # another process writing for too long
        with pytest.raises(StorageError) as e:
            await s.begin_turn(cid, "hello", None)
        assert "locked" in e.value.user_message and str(s.path) in e.value.user_message
        history, _ = await s.context(cid, 1000)  # readers still work in WAL mode
        assert history == []
        holder.execute("ROLLBACK")
        holder.close()
        assert await s.begin_turn(cid, "hello", None) == 0
    finally:
        await s.close()


class FullDisk:
    """A media writer whose disk is full (the MediaStore API, failing like os.write does)."""

    def __init__(self, inner: MediaStore) -> None:
        self.inner, self.full = inner, False

    async def put(self, data: bytes, mime: str) -> Path:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return await self.inner.put(data, mime)


async def test_disk_full_while_saving_media_fails_cleanly(tmp_path):
    data = tmp_path / "data"
    writer = FullDisk(MediaStore(data))
    s = sqlite_at(data, writer)
    await s.open()
    try:
        cid = await s.get_or_create(KEY_A)
        t = await s.begin_turn(cid, "first", None)
        await s.add_resource(cid, t, media("chelsea.png"), kind="image", mime="image/png", origin="user", description="c")
        writer.full = True
        with pytest.raises(StorageError) as e:
            await s.add_resource(cid, t, media("rocket.jpg"), kind="image", mime="image/jpeg", origin="user",
                                 description="r")
        assert "disk is full" in e.value.user_message
        assert [r.id for r in await s.resources(cid)] == ["image-1"]  # no dangling row
        [(n,)] = await q(s, "SELECT count(*) FROM resources")
        assert n == 1
        [(check,)] = await q(s, "PRAGMA integrity_check")
        assert check == "ok"
        await s.finish_turn(cid, t, record("first", "", status="error", error=e.value.user_message))
        writer.full = False
        t2 = await s.begin_turn(cid, "again", None)
        again = await s.add_resource(cid, t2, media("rocket.jpg"), kind="image", mime="image/jpeg", origin="user",
                                     description="r")
        assert again.id == "image-2" and again.path.read_bytes() == media("rocket.jpg")
        history, _ = await s.context(cid, 1000)
        assert history[0].status == "error" and "disk is full" in history[0].answer
    finally:
        await s.close()


async def test_database_full_fails_the_write_cleanly(sqlite_store):
    store = sqlite_store
    cid = await store.get_or_create(KEY_A)
    await run_turn(store, cid, "a first request that fits", "coffee.png", answer="It fits.")
    [(pages,)] = await q(store, "PRAGMA page_count")
    await on_writer(store, f"PRAGMA max_page_count={pages}")  # the disk holding the database is full
    huge = "Describe this photo in great detail please. " * 20_000
    with pytest.raises(StorageError) as e:
        await store.begin_turn(cid, huge, None)
    assert "disk is full" in e.value.user_message and str(store.path) in e.value.user_message
    await on_writer(store, "PRAGMA max_page_count=4294967294")
    history, resources = await store.context(cid, 10_000)
    assert [(t.index, t.answer) for t in history] == [(0, "It fits.")]  # the failed turn left no trace
    assert [r.id for r in resources] == ["image-1"]
    assert await store.begin_turn(cid, "a normal request", None) == 1


async def test_open_store_from_settings_marks_and_prunes(tmp_path):
    from bot.settings import load_settings
    from bot.store import open_store

    data = tmp_path / "data"
    s = sqlite_at(data, MediaStore(data), clock=Clock(time.time() - 40 * 86400))
    await s.open()
    old = await s.get_or_create(KEY_A)
    await run_turn(s, old, "an old request", "chelsea.png")
    await s.close()
    s = sqlite_at(data, MediaStore(data))
    await s.open()
    live = await s.get_or_create(KEY_B)
    await s.begin_turn(live, "left running by a crash", None)
    await s.close()

    settings = load_settings(env={}, overrides={"storage": {"data_dir": str(data), "max_age_days": 30}})
    store = await open_store(settings.storage, MediaStore(data))
    try:
        assert await store.find(old) is None  # older than 30 days
        assert (await store.turns(live))[0]["status"] == "failed"
        assert not any((data / "media").rglob("*.png"))
    finally:
        await store.close()


def test_relative_data_dir_gives_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    async def go():
        s = sqlite_at(Path("rel-data"), MediaStore(Path("rel-data")))
        await s.open()
        try:
            cid = await s.get_or_create(KEY_A)
            t = await s.begin_turn(cid, "x", None)
            r = await s.add_resource(cid, t, media("text.png"), kind="image", mime="image/png", origin="user",
                                     description="text")
            assert r.path.is_absolute() and r.path.read_bytes() == media("text.png")
            assert (await s.resources(cid))[0].path == r.path
        finally:
            await s.close()

    asyncio.run(go())


CRASHER = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_store import sqlite_at
from bot.incoming import ConversationKey
from tests.test_store import MediaStore

async def main():
    data = Path({data!r})
    s = sqlite_at(data, MediaStore(data))
    await s.open()
    cid = await s.get_or_create(ConversationKey("terminal", "local", "tty", "session-1"))
    t = await s.begin_turn(cid, "Generate an image of a sunset over the sea", "me")
    await s.add_resource(cid, t, Path({photo!r}).read_bytes(), kind="image", mime="image/png", origin="user",
                         description="astronaut")
    print(cid, t, flush=True)
    await asyncio.sleep(3600)  # a long run, killed mid-way

asyncio.run(main())
"""


@pytest.mark.slow
async def test_killed_process_turn_is_marked_failed_and_conversation_continues(tmp_path):
    data = tmp_path / "data"
    code = CRASHER.format(root=str(ROOT), data=str(data), photo=str(MEDIA / "astronaut.png"))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=subprocess.PIPE, cwd=ROOT)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    cid, turn = line.decode().split()
    s = sqlite_at(data, MediaStore(data))
    await s.open()
    try:
        [(check,)] = await q(s, "PRAGMA integrity_check")
        assert check == "ok"
        assert (await s.turns(cid))[0]["status"] == "running"
        assert await s.mark_interrupted() == 1
        assert await s.mark_interrupted() == 0
        turns = await s.turns(cid)
        assert (turns[0]["status"], turns[0]["error"]) == ("failed", "interrupted")
        assert turns[0]["user_text"] == "Generate an image of a sunset over the sea"
        res = await s.resources(cid)
        assert res[0].id == "image-1" and res[0].path.read_bytes() == media("astronaut.png")
        assert await s.get_or_create(ConversationKey("terminal", "local", "tty", "session-1")) == cid
        nxt = await s.begin_turn(cid, "try again", "me")
        assert nxt == int(turn) + 1
        await s.finish_turn(cid, nxt, record("try again", "Here is your sunset."))
        history, _ = await s.context(cid, 1000)
        assert [(t.index, t.status) for t in history] == [(1, "ok"), (0, "failed")]
    finally:
        await s.close()


WRITER = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_store import sqlite_at
from bot.incoming import ConversationKey
from pipeline.types import RunRecord
from tests.test_store import MediaStore

async def main():
    data = Path({data!r})
    s = sqlite_at(data, MediaStore(data))
    await s.open()
    cid = await s.get_or_create(ConversationKey("terminal", "local", "tty", "busy"))
    photo = Path({photo!r}).read_bytes()
    i = 0
    while True:  # write as fast as possible until killed
        t = await s.begin_turn(cid, f"request {{i}}", "me")
        # distinct content per turn so every turn writes a new media file
        await s.add_resource(cid, t, photo + i.to_bytes(4, "big"), kind="image", mime="image/png",
                             origin="task:0", description=f"result {{i}}")
        await s.finish_turn(cid, t, RunRecord(f"request {{i}}", response=f"answer {{i}}"))
        print(cid, t, flush=True)
        i += 1

asyncio.run(main())
"""


@pytest.mark.slow
async def test_kill_during_writes_loses_nothing_committed(tmp_path):
    data = tmp_path / "data"
    code = WRITER.format(root=str(ROOT), data=str(data), photo=str(MEDIA / "coffee.png"))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=subprocess.PIPE, cwd=ROOT)
    done = []
    try:
        while len(done) < 15:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "writer died"
            done.append(line.decode().split())
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-write, most likely
        await proc.wait()
    cid = done[0][0]
    s = sqlite_at(data, MediaStore(data))
    await s.open()
    try:
        [(check,)] = await q(s, "PRAGMA integrity_check")
        assert check == "ok"
        assert await s.mark_interrupted() <= 1
        turns = {t["index"]: t for t in await s.turns(cid)}
        resources = {r.turn: r for r in await s.resources(cid)}
        photo = media("coffee.png")
        for _, t in done:  # every turn reported as finished is there, whole
            t = int(t)
            assert turns[t]["status"] == "ok" and turns[t]["answer"] == f"answer {t}"
            assert resources[t].path.read_bytes() == photo + t.to_bytes(4, "big")
        assert all(t["status"] in ("ok", "failed") for t in turns.values())
        nxt = await s.begin_turn(cid, "after the crash", "me")
        assert nxt == max(turns) + 1
    finally:
        await s.close()


async def test_thread_locks_order_same_key_and_overlap_different_keys():
    locks = ThreadLocks()
    log: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def first():
        async with locks.lock("k1"):
            log.append("first in")
            first_in.set()
            await release_first.wait()
            log.append("first out")

    async def second():
        await first_in.wait()
        async with locks.lock("k1"):
            log.append("second in")

    async def other():
        await first_in.wait()
        async with locks.lock("k2"):
            log.append("other in")

    t1, t2 = asyncio.create_task(first()), asyncio.create_task(second())
    await asyncio.wait_for(other(), 1)  # a different key does not wait for k1
    await asyncio.sleep(0.01)
    assert log == ["first in", "other in"]  # the same key waits
    assert len(locks) == 1
    release_first.set()
    await asyncio.gather(t1, t2)
    assert log == ["first in", "other in", "first out", "second in"]
    assert len(locks) == 0  # idle locks are dropped

    # many waiters on one key run in arrival order; a cancelled waiter leaks nothing
    order = []

    async def worker(i):
        async with locks.lock("k"):
            order.append(i)
            await asyncio.sleep(0)

    holder = asyncio.Event()

    async def hold():
        async with locks.lock("k"):
            await holder.wait()

    h = asyncio.create_task(hold())
    await asyncio.sleep(0)
    ws = [asyncio.create_task(worker(i)) for i in range(20)]
    await asyncio.sleep(0)
    ws[5].cancel()
    holder.set()
    await asyncio.gather(h, *ws, return_exceptions=True)
    assert order == [i for i in range(20) if i != 5]
    assert len(locks) == 0


async def test_prune_by_age(new_store):
    clock = Clock()
    s = new_store(clock=clock)
    await s.open()
    try:
        old = await s.get_or_create(KEY_A)
        _, (old_photo,) = await run_turn(s, old, "old request", "chelsea.png")
        _, (shared_old,) = await run_turn(s, old, "old request 2", "rocket.jpg")
        clock.t += 10 * 86400
        new = await s.get_or_create(KEY_B)
        _, (shared_new,) = await run_turn(s, new, "new request", "rocket.jpg")
        assert shared_new.path == shared_old.path  # same content, one file
        clock.t += 86400
        rep = await s.prune(max_age_days=5, max_media_bytes=None)
        assert (rep.conversations, rep.files) == (1, 1)
        assert rep.bytes_freed == len(media("chelsea.png"))
        assert await s.find(old) is None and await s.resources(old) == []
        assert not old_photo.path.exists()
        assert shared_new.path.read_bytes() == media("rocket.jpg")  # still used by the kept one
        assert await s.find(new) == KEY_B
        assert await s.prune(max_age_days=5, max_media_bytes=None) == PruneReport(0, 0, 0, len(media("rocket.jpg")))
    finally:
        await s.close()


async def test_prune_by_media_size_oldest_first_and_keeps_running(new_store):
    clock = Clock()
    s = new_store(clock=clock)
    await s.open()
    try:
        ids = []
        for i, name in enumerate(["chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg"]):
            cid = await s.get_or_create(ConversationKey("discord", "g", "c", f"t{i}"))
            await run_turn(s, cid, f"request {i}", name)
            ids.append(cid)
            clock.t += 60
        running = await s.get_or_create(ConversationKey("discord", "g", "c", "busy"))
        t = await s.begin_turn(running, "in flight", None)
        await s.add_resource(running, t, media("camera.png"), kind="image", mime="image/png", origin="user",
                             description="camera")
        # the oldest conversation becomes active again: it is now the newest
        clock.t += 60
        await run_turn(s, ids[0], "back again")
        sizes = {n: len(media(n)) for n in ["chelsea.png", "astronaut.png", "coffee.png", "rocket.jpg", "camera.png"]}
        total = sum(sizes.values())
        assert await s.media_bytes() == total
        limit = total - sizes["astronaut.png"] - 1  # needs two deletions: astronaut (oldest), then coffee
        clock.t += RECENT_SECONDS + 1  # conversations active in the last 10 minutes are never pruned
        rep = await s.prune(max_age_days=None, max_media_bytes=limit)
        assert rep.conversations == 2 and rep.files == 2
        assert rep.bytes_freed == sizes["astronaut.png"] + sizes["coffee.png"]
        assert rep.media_bytes == await s.media_bytes() <= limit
        assert [await s.find(c) is not None for c in ids] == [True, False, False, True]
        assert await s.find(running) is not None
        # a limit no conversation can meet deletes everything but the running one
        rep = await s.prune(max_age_days=None, max_media_bytes=0)
        assert rep.conversations == 2 and rep.media_bytes == sizes["camera.png"]
        assert [r.id for r in await s.resources(running)] == ["image-1"]
    finally:
        await s.close()


async def test_forget_deletes_conversation_and_unshared_media(store):
    a = await store.get_or_create(KEY_A)
    b = await store.get_or_create(KEY_B)
    _, (a_only,) = await run_turn(store, a, "cat", "chelsea.png")
    _, (a_shared,) = await run_turn(store, a, "rocket", "rocket.jpg")
    _, (b_shared,) = await run_turn(store, b, "rocket too", "rocket.jpg")
    assert await store.forget(a) is True
    assert await store.forget(a) is False
    assert await store.find(a) is None
    assert await store.turns(a) == [] and await store.resources(a) == []
    assert not a_only.path.exists()
    assert b_shared.path.read_bytes() == media("rocket.jpg")
    # a new conversation on the same key starts fresh
    again = await store.get_or_create(KEY_A)
    assert again != a and await store.begin_turn(again, "hi", None) == 0


async def test_unknown_conversation_and_closed_store(tmp_path, store, new_store):
    with pytest.raises(StorageError) as e:
        await store.begin_turn("missing", "hi", None)
    assert "no longer exists" in e.value.user_message
    cid = await store.get_or_create(KEY_A)
    with pytest.raises(StorageError) as e:
        await store.finish_turn(cid, 7, record("x", "y"))
    assert "no longer exists" in e.value.user_message
    with pytest.raises(StorageError) as e:
        await store.add_resource("missing", 0, media("coffee.png"), kind="image", mime="image/png", origin="user",
                                 description="coffee")
    assert "no longer exists" in e.value.user_message
    closed = new_store(tmp_path / "other")
    with pytest.raises(StorageError, match="not open"):
        await closed.resources("x")


async def test_undecodable_text_is_stored_with_replacement_characters(store):
    cid = await store.get_or_create(KEY_A)
    t = await store.begin_turn(cid, "caf\udce9 photo", "U\ud800")
    r = await store.add_resource(cid, t, media("coffee.png"), kind="image", mime="image/png", origin="user",
                                 description="coffee \udce9", name="caf\udce9.png")
    await store.finish_turn(cid, t, record("caf\udce9", "Un caf\udce9."))
    (turn,) = await store.turns(cid)
    assert turn["user_text"] == "caf\ufffd photo" and turn["answer"] == "Un caf\ufffd."
    assert r.name == "caf\ufffd.png" and (await store.resources(cid))[0].description == "coffee \ufffd"


def test_clip_summary():
    assert clip_summary("  a\n\nb  ") == "a b"
    text = "word " * 200
    out = clip_summary(text)
    assert len(out) <= 300 and out.endswith("…") and not out[:-1].endswith(" ")


# -- migrations: a v1 file with awkward rows ---------------------------------------------------


async def test_v1_database_made_by_the_runner_upgrades_in_place(tmp_path):
    """A v1 file (made by applying only revision 0001's statements) with awkward rows upgrades to v2
    with every derived value computed as the store computes it for new rows."""
    data = tmp_path / "data"
    data.mkdir()
    db_file = data / "conversations.sqlite3"
    long_answer = "The image shows a tabby cat on a blue couch, with café, 猫 and 🐱 nearby. " * 12
    with sqlite3.connect(db_file) as db:
        db.executescript(importlib.import_module("bot.store.sql.alembic.versions.r0001_conversations_turns_resources").SQL)
        db.execute("PRAGMA user_version=1")
        db.executemany("INSERT INTO conversations VALUES (?,?,?)", [
            ("c1", "slack:T1:C1:1700000000.000100", 1000.0),
            ("c2", "terminal:local:tty:session:with:colons", 2000.0),
            ("c3", "bare", 3000.0),
        ])
        db.executemany("INSERT INTO turns VALUES (?,?,?,?,?,?)", [
            ("c1", 0, "Describe chelsea.png", long_answer, "ok", 1500.0),
            ("c1", 1, "Make it grey", "", "running", 1600.0),
            ("c2", 0, "hi", "  a\n\nspaced   answer ", "error", 1900.0),  # older than its conversation
        ])
        db.executemany("INSERT INTO resources VALUES (?,?,?,?,?,?,?,?,?)", [
            ("c1", "image-7", "image", "media/b.png", "image/png", 20, "task:0", "grey version", 1),
            ("c1", "image-2", "image", "media/a.png", "image/png", 10, "user", "photo a.png", 0),
            ("c1", "notes", "text", "media/n.txt", "text/plain", 5, "user", "", None),
            ("gone", "image-1", "image", "media/g.png", "image/png", 1, "user", "orphan row", 0),
        ])
    s = sqlite_at(data, MediaStore(data))
    await s.open()
    try:
        assert await q(s, "SELECT user_version FROM pragma_user_version") == [(5,)]
        assert await s.find("c1") == ConversationKey("slack", "T1", "C1", "1700000000.000100")
        assert await s.find("c2") == ConversationKey("terminal", "local", "tty", "session:with:colons")
        assert await s.find("c3") == ConversationKey("bare", "", "", "")
        updated = dict(await q(s, "SELECT id, updated FROM conversations"))
        assert updated == {"c1": 1600.0, "c2": 2000.0, "c3": 3000.0}  # newest turn start, or creation
        rows = await q(s, "SELECT conversation_id, idx, status, summary, tokens, finished FROM turns ORDER BY 1, 2")
        want_summary = clip_summary(long_answer)
        assert rows == [
            ("c1", 0, "ok", want_summary, count_tokens("Describe chelsea.png") + count_tokens(want_summary), 1500.0),
            ("c1", 1, "running", "", count_tokens("Make it grey"), None),
            ("c2", 0, "error", "a spaced answer", count_tokens("hi") + count_tokens("a spaced answer"), 1900.0),
        ]
        assert len(want_summary) <= 300 and want_summary.endswith("…")
        turns = await s.turns("c1")
        assert turns[0]["answer"] == long_answer  # the full answer is kept for display
        res = await q(s, "SELECT conversation_id, n, id, seq, tokens, created FROM resources ORDER BY 1, 2")
        views = {r.id: count_json_tokens(r.prompt_view()) for r in await s.resources("c1")}
        assert res == [  # stored order kept; per-kind number parsed from the id; orphan row dropped
            ("c1", 1, "image-7", 7, views["image-7"], 1000.0),
            ("c1", 2, "image-2", 2, views["image-2"], 1000.0),
            ("c1", 3, "notes", 0, views["notes"], 1000.0),
        ]
        t = await s.begin_turn("c1", "one more", None)
        new = await s.add_resource("c1", t, media("rocket.jpg"), kind="image", mime="image/jpeg", origin="user",
                                   description="rocket")
        assert new.id == "image-8"  # numbering continues after the highest migrated number
        [(check,)] = await q(s, "PRAGMA integrity_check")
        assert check == "ok"
    finally:
        await s.close()


# -- retention and chat-log decisions, without a database ----------------------------------------


def test_expired_keeps_running_and_recent_conversations():
    day = 86400.0
    convs = [("old", 0.0, False), ("old-running", 0.0, True), ("edge", 5 * day, False), ("new", 9 * day, False)]
    assert expired(convs, now=10 * day, max_age_days=5) == ["old"]
    assert expired(convs, now=10 * day, max_age_days=None) == []
    assert expired(convs, now=10 * day, max_age_days=0) == ["old", "edge", "new"]


def test_over_budget_counts_shared_files_once_and_deletes_oldest_first():
    convs = [("a", 1.0, False), ("b", 2.0, True), ("c", 3.0, False), ("d", 4.0, False)]
    files = [("a", "x.png", 100), ("c", "x.png", 100), ("a", "y.png", 50), ("b", "z.png", 30), ("d", "w.png", 20)]
    # total 200; deleting a frees only y (x is shared with c): 150, then c frees x: 50
    assert over_budget(convs, files, gone=[], max_media_bytes=200) == []
    assert over_budget(convs, files, gone=[], max_media_bytes=150) == ["a"]
    assert over_budget(convs, files, gone=[], max_media_bytes=149) == ["a", "c"]
    assert over_budget(convs, files, gone=["c"], max_media_bytes=149) == ["a"]  # c is already going
    # the running conversation is never chosen, even when the limit cannot be met without it
    assert over_budget(convs, files, gone=[], max_media_bytes=0) == ["a", "c", "d"]


def test_select_history_keeps_the_newest_turns_that_fit():
    photo = Resource("image-1", "image", Path("/m/p.png"), "image/png", 10, "user", "photo", 1)
    turns = [(2, "third", "ok 3", "ok", 10), (1, "second", "ok 2", "ok", 10), (0, "first", "ok 1", "ok", 10)]
    per_turn = 10 + TURN_OVERHEAD_TOKENS
    assert [t.index for t in select_history(turns, [(photo, 40)], 10_000)] == [2, 1, 0]
    # turn 1 costs 40 more for its photo: with room for two plain turns, only the newest fits
    cut = select_history(turns, [(photo, 40)], 2 * per_turn)
    assert [t.index for t in cut] == [2]
    assert [t.index for t in select_history(turns, [], 2 * per_turn)] == [2, 1]
    full = select_history(turns, [(photo, 40)], 3 * per_turn + 40)
    assert [t.index for t in full] == [2, 1, 0] and full[1].resources == (photo,) and full[0].resources == ()
    assert select_history(turns, [], per_turn - 1) == []
