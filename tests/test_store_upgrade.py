"""SQLite files of every earlier release upgrade in place: schema versions 1 to 4 (the numbered
``.sql`` chain) and Alembic revisions 0006 and 0007 (tests/fixtures/store/README.md says how each
fixture was made). Alembic is the only schema source: a new file gets exactly the schema an
upgraded one has, and a current file opens without importing Alembic.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bot.incoming import ConversationKey
from bot.store import MediaStore
from bot.store.sql import migrate
from bot.store.sql.revisions import HEAD, REVISIONS
from pipeline.types import RunRecord
from tests.test_store import sqlite_at

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "store"
KEY = ConversationKey("slack", "T024BE7LD", "C0ABCD123", "1731400000.000200")
OLD = ["conversations-v1.sqlite3", "conversations-v2.sqlite3", "conversations-v3.sqlite3", "conversations-v4.sqlite3",
       "conversations-r0006.sqlite3", "conversations-r0007.sqlite3"]


def schema(path: Path) -> tuple[list[tuple], list[tuple], tuple]:
    """The file's tables and indexes as SQLite keeps their SQL (whitespace aside), its Alembic
    revision and legacy version."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        return (sorted((t, n, tb, " ".join((sql or "").split())) for t, n, tb, sql in rows),
                db.execute("SELECT version_num FROM alembic_version").fetchall(),
                db.execute("PRAGMA user_version").fetchone())


@pytest.mark.parametrize("fixture", OLD)
async def test_an_old_file_upgrades_in_place_and_keeps_its_conversation(tmp_path, fixture):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(FIXTURES / fixture, data / "conversations.sqlite3")
    async with sqlite_at(data, MediaStore(data)) as s:
        assert s.database.applied[-1:] == [HEAD]  # every fixture is older than the head
        cid = await s.get_or_create(KEY)
        assert cid == "4f1c2a9e07"
        turns = await s.turns(cid)
        assert [(t["index"], t["status"], t["user"] is None or t["user"] == "U024BE7LF") for t in turns] == [
            (0, "ok", True), (1, "ok", True)]
        assert turns[0]["user_text"].startswith("Count the cats") and turns[0]["answer"].startswith("There are two cats")
        assert turns[1]["answer"] == "Two cats sleep on a pink blanket next to two remote controls."
        res = await s.resources(cid)
        assert [(r.id, r.kind, r.origin, r.turn, r.size) for r in res] == [
            ("image-1", "image", "user", 0, 466706), ("image-2", "image", "task:0", 0, 51234)]
        assert res[0].path == data / "media/cc/cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7.png"
        history, resources = await s.context(cid, 10_000)  # the chat log the planner sees
        assert [(t.index, t.answer) for t in history] == [
            (1, "Two cats sleep on a pink blanket next to two remote controls."),
            (0, "There are two cats on the blanket; the boxes are in image-2.")]
        assert [r.id for r in resources] == ["image-1", "image-2"] and history[1].resources[0].id == "image-1"
        t = await s.begin_turn(cid, "Make image-2 black and white.", "U024BE7LF")
        new = await s.add_resource(cid, t, b"\x89PNG\r\n\x1a\n grey", kind="image", mime="image/png",
                                   origin="task:0", description="grey version")
        await s.finish_turn(cid, t, RunRecord("Make image-2 black and white.", response="Done."))
        assert (t, new.id) == (2, "image-3")  # numbering continues after the kept files
        assert await s.record_feedback(cid, 0, "U2", "bad") and await s.take_rate("slack:U1", 1, 60.0) == 0.0
    tables, version, legacy = schema(data / "conversations.sqlite3")
    assert version == [(HEAD,)] and legacy == (5,)
    with sqlite3.connect(data / "conversations.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        kept = db.execute("SELECT user, verdict FROM feedback ORDER BY user").fetchall()
    had_feedback = fixture not in OLD[:3]  # the feedback table came with schema version 4
    assert kept == [("U024BE7LF", "good")] * had_feedback + [("U2", "bad")]


async def test_a_new_file_has_exactly_the_schema_of_an_upgraded_one(tmp_path):
    new = tmp_path / "new"
    async with sqlite_at(new, MediaStore(new)) as s:
        assert s.database.applied == list(REVISIONS)
    for fixture in [*OLD, "conversations-v5.sqlite3"]:
        data = tmp_path / fixture
        data.mkdir()
        shutil.copy(FIXTURES / fixture, data / "conversations.sqlite3")
        async with sqlite_at(data, MediaStore(data)):
            pass
        assert schema(data / "conversations.sqlite3") == schema(new / "conversations.sqlite3"), fixture


def test_the_revision_constants_are_the_shipped_revision_files():
    assert list(REVISIONS) == [r.revision for r in reversed(list(migrate.SCRIPTS.walk_revisions()))]
    assert HEAD == migrate.HEAD
    files = sorted(p.name[1:5] for p in (ROOT / "bot/store/sql/alembic/versions").glob("r*.py"))
    assert files == list(REVISIONS)


OPEN = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_store import sqlite_at
from bot.store import MediaStore

async def main():
    data = Path({data!r})
    async with sqlite_at(data, MediaStore(data)) as s:
        print(s.database.applied, "alembic" in sys.modules, flush=True)

asyncio.run(main())
"""


def test_a_current_file_opens_without_importing_alembic(tmp_path):
    data = tmp_path / "data"
    run = [sys.executable, "-c", OPEN.format(root=str(ROOT), data=str(data))]
    first = subprocess.run(run, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split("]")[1].strip() == "True"  # created: migrated by Alembic
    again = subprocess.run(run, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "[] False"  # current: one query, no Alembic
