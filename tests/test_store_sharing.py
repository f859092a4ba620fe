"""One data directory shared by several processes (issue 14): owners with heartbeat leases, pruning
that spares live and recent work, the media quota enforced at write time for every command.

Rows about processes use real processes: ``python -m hugginggpt`` with ``--sandbox`` (stand-in
controller and models), or small scripts opening the SQLite store, killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import start_caption_in_chat
from PIL import Image

from bot.errors import StorageError
from bot.incoming import ConversationKey
from bot.store import LocalResourceSink, MediaStore, lease
from bot.store.lease import LEASE_SECONDS, RECENT_SECONDS
from bot.store.retention import MediaFile, plan
from bot.store.sql import upkeep
from pipeline.types import RunRecord
from tests.test_store import sqlite_at

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT / "tests" / "fixtures" / "media"
KEY = ConversationKey("discord", "guild-1", "chan-1", "thread-1")


def media(name: str) -> bytes:
    return (MEDIA / name).read_bytes()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def cli_env(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(data)
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


SLOW_CLI = (
    "import sys; import sandbox; orig = sandbox.Sandbox.__init__\n"
    "def slow(self, **kw):\n    orig(self, latency={{'image-to-text': {latency}}})\n"
    "sandbox.Sandbox.__init__ = slow\nfrom hugginggpt import main; sys.exit(main(sys.argv[1:]))"
)


def no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback" not in t, t


# -- row: a second process starting on the same data dir with max_media_bytes --------------------


@pytest.mark.slow
def test_second_process_start_leaves_the_first_ones_running_turn_and_files_alone(tmp_path):
    data = tmp_path / "data"
    big = tmp_path / "big.png"  # incompressible noise: the data dir is over the second process's quota
    Image.frombytes("RGB", (700, 700), os.urandom(700 * 700 * 3)).save(big)
    assert big.stat().st_size > 1024 * 1024
    first = subprocess.Popen(
        [sys.executable, "-c", SLOW_CLI.format(latency=12), "chat", "--sandbox"], cwd=tmp_path, env=cli_env(data),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        seen, conv = start_caption_in_chat(first, big)
        assert conv and "running on" in seen, seen

        # a second bot starts on the same directory with a 1 MiB quota, while the first one's turn runs
        second = subprocess.run(
            [sys.executable, "-m", "hugginggpt", "chat", "--sandbox"], cwd=tmp_path, input="/quit\n",
            env=cli_env(data, HUGGINGGPT_STORAGE__MAX_MEDIA_BYTES=str(1024 * 1024)),
            capture_output=True, text=True, timeout=60,
        )
        no_traceback(second.stdout, second.stderr)
        assert second.returncode == 0, second.stderr

        first.stdin.write("/quit\n")
        first.stdin.flush()
        out, err = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    no_traceback(seen + out, err)
    assert first.returncode == 0, err
    assert "no longer exists" not in seen + out + err
    assert "Sandbox stand-in" in out  # the first process's answer arrived

    async def check():
        async with sqlite_at(data, MediaStore(data)) as s:
            [turn] = await s.turns(conv)
            assert (turn["status"], turn["error"]) == ("ok", None)
            [upload] = await s.resources(conv)
            assert upload.path.read_bytes() == big.read_bytes()

    asyncio.run(check())


# -- row: kill -9 mid-turn; the turn is marked interrupted once its owner's lease has expired -----

OWNER_SCRIPT = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from bot.store import lease
lease.HOST = "another-host"  # its process id means nothing here: only its lease tells whether it lives
lease.HEARTBEAT_SECONDS = {beat!r}
from bot.incoming import ConversationKey
from bot.store import MediaStore
from tests.test_store import sqlite_at

async def main():
    data = Path({data!r})
    async with sqlite_at(data, MediaStore(data)) as s:
        cid = await s.get_or_create(ConversationKey("discord", "guild-1", "chan-1", "thread-1"))
        t = await s.begin_turn(cid, "Draw a lighthouse at dusk in the style of this photo", "U1")
        await s.add_resource(cid, t, Path({photo!r}).read_bytes(), kind="image", mime="image/png",
                             origin="user", description="photo")
        print(cid, t, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def start_owner(data: Path, beat: float) -> tuple[asyncio.subprocess.Process, str]:
    code = OWNER_SCRIPT.format(root=str(ROOT), data=str(data), photo=str(MEDIA / "chelsea.png"), beat=beat)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=subprocess.PIPE, cwd=ROOT)
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line, "the owner process died"
    return proc, line.decode().split()[0]


async def kill(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
async def test_killed_owner_on_another_host_is_marked_interrupted_only_after_its_lease(tmp_path):
    data = tmp_path / "data"
    proc, cid = await start_owner(data, beat=10.0)
    await kill(proc)
    async with sqlite_at(data, MediaStore(data)) as s:
        assert await s.mark_interrupted() == 0  # its lease (30 s) has not expired: it may still run
        assert (await s.turns(cid))[0]["status"] == "running"
        report = await s.prune(max_age_days=None, max_media_bytes=0)
        assert report.conversations == 0 and await s.resources(cid)
    later = Clock(time.time() + LEASE_SECONDS + 1)
    async with sqlite_at(data, MediaStore(data), clock=later) as s:  # the next start, after the lease
        assert await s.mark_interrupted() == 1
        [turn] = await s.turns(cid)
        assert (turn["status"], turn["error"]) == ("failed", "interrupted")
        assert turn["user_text"] == "Draw a lighthouse at dusk in the style of this photo"  # turns lost: 0
        [photo] = await s.resources(cid)
        assert photo.path.read_bytes() == media("chelsea.png")
        assert await s.begin_turn(cid, "try again", "U1") == 1


@pytest.mark.slow
async def test_heartbeat_keeps_a_live_owner_then_kill_9_is_noticed(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "LEASE_SECONDS", 1.0)  # both sides: beat every 0.2 s, gone after 1 s
    monkeypatch.setattr(lease, "HEARTBEAT_SECONDS", 3600.0)  # this side marks only when asked below
    data = tmp_path / "data"
    proc, cid = await start_owner(data, beat=0.2)
    try:
        async with sqlite_at(data, MediaStore(data)) as s:
            await asyncio.sleep(2.5)  # longer than the lease: only its heartbeat keeps it
            assert await s.mark_interrupted() == 0
            assert (await s.turns(cid))[0]["status"] == "running"
            forget = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "hugginggpt", "store", "forget", cid], cwd=tmp_path,
                env=cli_env(data), capture_output=True, text=True, timeout=60,
            )
            no_traceback(forget.stdout, forget.stderr)
            assert forget.returncode == 8 and "has a turn running in a live process" in forget.stderr
            assert await s.find(cid) is not None
            await kill(proc)
            await asyncio.sleep(1.5)
            assert await s.mark_interrupted() == 1
            assert (await s.turns(cid))[0]["error"] == "interrupted"
    finally:
        if proc.returncode is None:
            await kill(proc)


def test_killed_run_on_this_host_is_noticed_at_once_by_the_next_start(tmp_path):
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_CLI.format(latency=60), "chat", "--sandbox"], cwd=tmp_path, env=cli_env(data),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen, conv = start_caption_in_chat(proc, MEDIA / "rocket.jpg")
    proc.kill()
    proc.wait()
    p = subprocess.run(
        [sys.executable, "-m", "hugginggpt", "chat", "--sandbox", "--conversation", conv], cwd=tmp_path,
        input="/quit\n", env=cli_env(data), capture_output=True, text=True, timeout=60,
    )
    no_traceback(p.stdout, p.stderr)
    # same host, process gone: marked by the next start at once, well within the 30 s lease
    assert p.returncode == 0 and "(failed)" in p.stdout


# -- concurrent writers ----------------------------------------------------------------------------

WRITER = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from bot.incoming import ConversationKey
from bot.store import MediaStore
from tests.test_store import sqlite_at
from pipeline.types import RunRecord

async def main():
    data = Path({data!r})
    photo = Path({photo!r}).read_bytes()
    async with sqlite_at(data, MediaStore(data)) as s:
        for i in range({n}):
            cid = await s.get_or_create(ConversationKey("slack", "T1", "C1", f"{name}-{{i % 5}}"))
            t = await s.begin_turn(cid, f"{name} request {{i}}", "U1")
            await s.add_resource(cid, t, photo + b"{name}" + i.to_bytes(4, "big"), kind="image",
                                 mime="image/png", origin="task:0", description=f"result {{i}}")
            await s.finish_turn(cid, t, RunRecord(f"{name} request {{i}}", response=f"{name} answer {{i}}"))
    print("done", flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
def test_concurrent_writers_in_two_processes_do_not_lock_each_other_out(tmp_path):
    data = tmp_path / "data"
    n = 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER.format(root=str(ROOT), data=str(data), photo=str(MEDIA / "text.png"),
                                                 n=n, name=name)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for name in ("alpha", "beta")
    ]
    prunes = []
    while any(p.poll() is None for p in procs):  # a maintenance command now and then, meanwhile
        prunes.append(subprocess.run(
            [sys.executable, "-m", "hugginggpt", "store", "prune", "--max-age-days", "30"], cwd=tmp_path,
            env=cli_env(data), capture_output=True, text=True, timeout=60,
        ))
    results = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and out.strip() == "done", err
        assert "locked" not in err
    for p in prunes:
        assert p.returncode == 0 and p.stdout.startswith("Removed 0 conversations"), p.stderr

    async def check():
        async with sqlite_at(data, MediaStore(data)) as s:
            for name in ("alpha", "beta"):
                turns = []
                for k in range(5):
                    cid = await s.get_or_create(ConversationKey("slack", "T1", "C1", f"{name}-{k}"))
                    turns += await s.turns(cid)
                assert len(turns) == n and all(t["status"] == "ok" for t in turns)
            assert await s.media_bytes() == sum(r.stat().st_size for r in (data / "media").rglob("*.png"))

    asyncio.run(check())


# -- row: the media quota, enforced when files are written, for every command ---------------------


def test_run_files_are_recorded_and_counted(tmp_path):
    data = tmp_path / "data"
    p = subprocess.run(
        [sys.executable, "-m", "hugginggpt", "run", "--sandbox", "Generate an image of a cat on a red sofa"],
        cwd=tmp_path, env=cli_env(data), capture_output=True, text=True, timeout=120,
    )
    no_traceback(p.stdout, p.stderr)
    assert p.returncode == 0, p.stderr
    files = [f for f in (data / "media").rglob("*") if f.is_file()]
    assert files

    async def check():
        async with sqlite_at(data, MediaStore(data)) as s:
            assert await s.media_bytes() == sum(f.stat().st_size for f in files) > 0

    asyncio.run(check())


def test_run_makes_room_by_deleting_the_oldest_unreferenced_file_first(tmp_path):
    data = tmp_path / "data"
    two_days_ago = Clock(time.time() - 2 * 86400)

    async def setup() -> tuple[str, Path, Path, int]:
        store_media = MediaStore(data)
        async with sqlite_at(data, store_media, clock=two_days_ago) as s:
            # an old `hugginggpt run` output nobody refers to ...
            old_run = await LocalResourceSink(store_media).add(
                media("astronaut.png"), kind="image", mime="image/png", origin="task:0", description="old output")
            two_days_ago.t += 3600
            # ... and an old conversation, more recent than that file
            cid = await s.get_or_create(KEY)
            t = await s.begin_turn(cid, "Describe this", "U1")
            kept = await s.add_resource(cid, t, media("coffee.png"), kind="image", mime="image/png", origin="user",
                                        description="coffee")
            await s.finish_turn(cid, t, RunRecord("Describe this", response="Coffee."))
            return cid, old_run.path, kept.path, await s.media_bytes()

    cid, old_run, kept, total = asyncio.run(setup())
    assert total == len(media("astronaut.png")) + len(media("coffee.png"))
    quota = total + 1000  # the new image does not fit without deleting something
    p = subprocess.run(
        [sys.executable, "-m", "hugginggpt", "run", "--sandbox", "--json", "Generate an image of a cat on a red sofa"],
        cwd=tmp_path, env=cli_env(data, HUGGINGGPT_STORAGE__MAX_MEDIA_BYTES=str(quota)),
        capture_output=True, text=True, timeout=120,
    )
    no_traceback(p.stdout, p.stderr)
    assert p.returncode == 0, p.stderr
    assert not old_run.exists()  # the oldest unreferenced file went first
    assert kept.read_bytes() == media("coffee.png")  # enough room: the conversation stays

    async def check():
        async with sqlite_at(data, MediaStore(data)) as s:
            assert await s.find(cid) == KEY
            used = await s.media_bytes()
            on_disk = sum(f.stat().st_size for f in (data / "media").rglob("*") if f.is_file())
            assert used == on_disk <= quota

    asyncio.run(check())


async def test_quota_refuses_a_write_when_only_live_or_recent_media_is_left(tmp_path):
    data = tmp_path / "data"
    clock = Clock(1_700_000_000.0)
    quota = len(media("astronaut.png")) + len(media("camera.png")) + 10
    async with sqlite_at(data, MediaStore(data), clock=clock, max_media_bytes=quota) as s:
        old = await s.get_or_create(KEY)
        t = await s.begin_turn(old, "first", "U1")
        first = await s.add_resource(old, t, media("astronaut.png"), kind="image", mime="image/png", origin="user",
                                     description="astronaut")
        await s.finish_turn(old, t, RunRecord("first", response="An astronaut."))
        clock.t += 60
        new = await s.get_or_create(ConversationKey("discord", "guild-1", "chan-1", "thread-2"))
        t2 = await s.begin_turn(new, "second", "U1")
        with pytest.raises(StorageError) as e:  # the first conversation was used a minute ago
            await s.add_resource(new, t2, media("coffee.png"), kind="image", mime="image/png", origin="user",
                                 description="coffee")
        msg = e.value.user_message
        assert "media storage" in msg and "is full" in msg and str(data / "media") in msg
        assert "raise [storage] max_media_bytes or prune" in msg
        assert first.path.read_bytes() == media("astronaut.png")  # nothing was deleted
        assert await s.resources(new) == []
        assert not MediaStore(data).path_for(media("coffee.png"), "image/png").exists()
        assert await s.media_bytes() == len(media("astronaut.png"))

        clock.t += RECENT_SECONDS  # ten minutes later the first conversation may go
        third = await s.add_resource(new, t2, media("coffee.png"), kind="image", mime="image/png", origin="user",
                                     description="coffee")
        assert await s.find(old) is None and not first.path.exists()
        assert third.path.read_bytes() == media("coffee.png")
        assert await s.media_bytes() == len(media("coffee.png")) <= quota


async def test_a_long_running_bot_stays_within_its_quota(tmp_path):
    data = tmp_path / "data"
    clock = Clock(1_700_000_000.0)
    photo = media("text.png")
    quota = 5 * len(photo) + 100
    async with sqlite_at(data, MediaStore(data), clock=clock, max_media_bytes=quota) as s:
        kept = []
        for i in range(20):  # a new thread every 5 minutes
            cid = await s.get_or_create(ConversationKey("slack", "T1", "C1", f"thread-{i}"))
            t = await s.begin_turn(cid, f"request {i}", "U1")
            await s.add_resource(cid, t, photo + i.to_bytes(4, "big"), kind="image", mime="image/png",
                                 origin="task:0", description=f"result {i}")
            await s.finish_turn(cid, t, RunRecord(f"request {i}", response="ok"))
            used = await s.media_bytes()
            assert used <= quota
            assert used == sum(f.stat().st_size for f in (data / "media").rglob("*") if f.is_file())
            kept.append(cid)
            clock.t += 300
        alive = [await s.find(c) is not None for c in kept]
        assert alive == [False] * 15 + [True] * 5  # the least recently active went, oldest first


async def test_run_sink_writes_are_pinned_while_the_run_lives_and_count(tmp_path):
    data = tmp_path / "data"
    clock = Clock(1_700_000_000.0)
    store_media = MediaStore(data)
    quota = len(media("coffee.png")) + 10
    async with sqlite_at(data, store_media, clock=clock, max_media_bytes=quota) as run:
        sink = LocalResourceSink(store_media)
        out = await sink.add(media("coffee.png"), kind="image", mime="image/png", origin="task:0", description="x")
        clock.t += 3 * RECENT_SECONDS  # old, but its run is still going (and renewing its lease): pinned
        await upkeep.beat(run.database, run.owner_id, now=clock(), orphans=True)
        async with sqlite_at(data, MediaStore(data), clock=clock, max_media_bytes=quota) as other:
            assert await other.media_bytes() == len(media("coffee.png"))
            rep = await other.prune(max_age_days=None, max_media_bytes=0)
            assert rep.files == 0 and out.path.exists()
            with pytest.raises(StorageError, match="is full"):
                await LocalResourceSink(other.media).add(media("camera.png"), kind="image", mime="image/png",
                                                         origin="task:0", description="y")
    # the run ended: its file is unpinned and, unused for 30 minutes, the quota may delete it
    async with sqlite_at(data, MediaStore(data), clock=clock) as s:
        rep = await s.prune(max_age_days=None, max_media_bytes=0)
        assert rep.files == 1 and not out.path.exists() and await s.media_bytes() == 0


async def test_upgrade_records_files_earlier_runs_left_in_the_media_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    db_file = data / "conversations.sqlite3"
    import importlib
    import sqlite3

    versions = "bot.store.sql.alembic.versions."
    with sqlite3.connect(db_file) as db:  # a version-2 data dir, as earlier releases made it
        db.executescript(importlib.import_module(versions + "r0001_conversations_turns_resources").SQL)
        db.executescript(importlib.import_module(versions + "r0002_clustered_turns_and_resources").SQL)
        db.execute("PRAGMA user_version=2")
    leftover = MediaStore(data).path_for(media("rocket.jpg"), "image/jpeg")
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(media("rocket.jpg"))
    (leftover.parent / f".{leftover.name}.abc.tmp").write_bytes(b"half")  # an interrupted write: not counted
    async with sqlite_at(data, MediaStore(data)) as s:
        assert await s.media_bytes() == len(media("rocket.jpg"))
        rep = await s.prune(max_age_days=None, max_media_bytes=0)  # just written: recent, kept
        assert rep.files == 0 and leftover.exists()


def test_plan_frees_unreferenced_files_oldest_first_then_conversations_and_never_protected():
    files = {
        "old-run.png": MediaFile(100, 10.0, False),
        "newer-run.png": MediaFile(100, 20.0, False),
        "pinned.png": MediaFile(100, 1.0, True),
        "a.png": MediaFile(50, 5.0, False),
        "shared.png": MediaFile(40, 5.0, False),
        "live.png": MediaFile(30, 5.0, False),
    }
    convs = [("a", 5.0, False), ("b", 6.0, False), ("live", 7.0, True)]
    refs = [("a", "a.png"), ("a", "shared.png"), ("b", "shared.png"), ("live", "live.png")]
    total = 420
    p = plan(convs, refs, files, now=100.0, max_age_days=None, max_media_bytes=total)
    assert (p.conversations, p.files, p.fits) == ([], [], True)
    p = plan(convs, refs, files, now=100.0, max_age_days=None, max_media_bytes=total - 1)
    assert (p.conversations, p.files, p.total) == ([], ["old-run.png"], 320)
    p = plan(convs, refs, files, now=100.0, max_age_days=None, max_media_bytes=total, incoming=250)
    assert (p.conversations, p.files) == (["a"], ["old-run.png", "newer-run.png", "a.png"])
    assert p.total == 170 and p.fits  # shared.png stays: b still refers to it
    p = plan(convs, refs, files, now=100.0, max_age_days=None, max_media_bytes=0)
    assert p.conversations == ["a", "b"] and "pinned.png" not in p.files and "live.png" not in p.files
    assert p.total == 130 and not p.fits


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--max-age-days", "-3", "--max-age-days: must be a number of days above 0"),
        ("--max-age-days", "inf", "--max-age-days: must be a number of days above 0"),
        ("--max-media-mb", "-1", "--max-media-mb: must be a number of MiB from 0"),
        ("--max-media-mb", "lots", "--max-media-mb: must be a number of MiB, not 'lots'"),
    ],
)
def test_store_prune_refuses_negative_or_absurd_options(tmp_path, option, value, expected):
    data = tmp_path / "data"
    p = subprocess.run(
        [sys.executable, "-m", "hugginggpt", "store", "prune", f"{option}={value}"], cwd=tmp_path, env=cli_env(data),
        capture_output=True, text=True, timeout=60,
    )
    no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2 and expected in p.stderr
    assert not data.exists()  # refused before anything was opened


async def test_looking_up_an_idle_conversation_keeps_it_from_being_pruned_before_its_turn(tmp_path):
    data = tmp_path / "data"
    clock = Clock(1_700_000_000.0)
    async with sqlite_at(data, MediaStore(data), clock=clock) as s:
        cid = await s.get_or_create(KEY)
        t = await s.begin_turn(cid, "first", "U1")
        await s.finish_turn(cid, t, RunRecord("first", response="ok"))
        clock.t += 2 * 86400
        assert await s.get_or_create(KEY) == cid  # the user comes back after two days ...
        rep = await s.prune(max_age_days=1, max_media_bytes=None)  # ... while another process prunes
        assert rep.conversations == 0
        assert await s.begin_turn(cid, "second", "U1") == 1
        await s.finish_turn(cid, 1, RunRecord("second", response="ok"))
        clock.t += 2 * 86400
        assert (await s.prune(max_age_days=1, max_media_bytes=None)).conversations == 1  # idle again: it goes
        assert await s.get_or_create(KEY) != cid  # a new conversation for the same thread
