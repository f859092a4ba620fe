"""Several processes as one bot (issue 11): the store's shared coordination, on SQLite and on a real
PostgreSQL server alike (the ``new_store`` fixture), plus what only one backend has: PostgreSQL's
errors as one sentence, and an SQLite data dir of schema 5 upgraded in place by Alembic.

Two store objects opened on one database stand for two processes (each registers its own owner
with its own lease); a third clock ahead by more than the lease stands for a process that died.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from bot.errors import StorageError
from bot.incoming import ConversationKey
from bot.store import Handover, MediaStore, lease
from bot.store.sql import migrate
from bot.store.sql.database import Database
from bot.store.sql.store import SQLStore
from tests.test_store import sqlite_at
from pipeline.types import RunRecord

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT / "tests" / "fixtures" / "media"
KEY = ConversationKey("slack", "T01", "C01", "1700000000.000100")
OTHER = ConversationKey("discord", "g1", "c1", "t1")


def done(text: str, answer: str) -> RunRecord:
    return RunRecord(text, response=answer)


async def pair(new_store, **kw):
    a, b = new_store(**kw), new_store(**kw)
    await a.open()
    await b.open()
    return a, b


async def test_a_delivery_is_claimed_by_exactly_one_process(new_store):
    a, b = await pair(new_store)
    try:
        results = await asyncio.gather(*[s.claim_delivery(["slack:event:Ev1", "slack:msg:C01:1.0"])
                                         for s in (a, b, a, b)])
        assert sorted(results) == [False, False, False, True]
        # the same message under another event id (app_mention + message) is the same delivery
        assert await b.claim_delivery(["slack:event:Ev2", "slack:msg:C01:1.0"]) is False
        assert await b.claim_delivery(["slack:event:Ev3", "slack:msg:C01:2.0"]) is True
    finally:
        await a.close()
        await b.close()


async def test_one_conversation_and_distinct_turn_indexes_across_processes(new_store):
    a, b = await pair(new_store)
    try:
        ids = await asyncio.gather(*[s.get_or_create(KEY) for s in (a, b, a, b)])
        assert len(set(ids)) == 1
        turns = await asyncio.gather(*[s.begin_turn(ids[0], f"request {i}", "U1") for i, s in enumerate((a, b) * 4)])
        assert sorted(turns) == list(range(8))
    finally:
        await a.close()
        await b.close()


async def test_a_threads_second_turn_waits_for_the_first_wherever_it_runs(new_store):
    a, b = await pair(new_store)
    try:
        cid = await a.get_or_create(KEY)
        first = await a.begin_turn(cid, "make a picture of a cat", "U1")
        second = await b.begin_turn(cid, "now make it blue", "U1")
        other = await b.get_or_create(OTHER)
        assert await b.wait_turn(other, await b.begin_turn(other, "unrelated", "U2"), poll=0.02) is False
        waiter = asyncio.create_task(b.wait_turn(cid, second, poll=0.02))
        await asyncio.sleep(0.15)
        assert not waiter.done()  # the first turn is still running in the other process
        await a.finish_turn(cid, first, done("make a picture of a cat", "Here is a cat."))
        assert await asyncio.wait_for(waiter, 5) is True
        history, _ = await b.context(cid, 1000)
        assert [t.answer for t in history] == ["Here is a cat."]  # the second turn plans with the first's answer
    finally:
        await a.close()
        await b.close()


async def test_rate_limit_is_shared_by_processes(new_store):
    clock = type("Clock", (), {"t": time.time(), "__call__": lambda self: self.t})()
    a, b = await pair(new_store, clock=clock)
    try:
        allowed = [await s.take_rate("slack:U1", 3, 60.0) for s in (a, b, a)]
        assert allowed == [0.0, 0.0, 0.0]
        wait = await b.take_rate("slack:U1", 3, 60.0)
        assert 0 < wait <= 20.0  # one more fits after period / limit at most
        assert await a.take_rate("slack:U2", 3, 60.0) == 0.0  # another user has their own budget
        clock.t += 20.0
        assert await a.take_rate("slack:U1", 3, 60.0) == 0.0
        assert await b.take_rate("slack:U1", 3, 60.0) > 0
        assert await b.take_rate("slack:U1", 0, 60.0) == 0.0  # 0: no limit
    finally:
        await a.close()
        await b.close()


async def test_run_slots_are_shared_and_a_closed_process_gives_its_slots_back(new_store):
    a, b = await pair(new_store)
    try:
        s1 = await a.take_slot("discord:U1", 2)
        s2 = await b.take_slot("discord:U1", 2)
        assert s1 and s2 and s1 != s2
        assert await a.take_slot("discord:U1", 2) is None
        assert await b.take_slot("discord:U2", 2) is not None
        await a.release_slot(s1)
        s3 = await b.take_slot("discord:U1", 2)
        assert s3 is not None
        await b.close()  # its process ends: its slots (s2, s3) go with it
        assert await a.take_slot("discord:U1", 2) is not None
    finally:
        await a.close()
        await b.close()


async def test_run_slots_asked_for_at_once_keep_the_limit_and_a_caller_gone_holds_none(new_store):
    a, b = await pair(new_store)
    try:  # a burst: the reservations that wait for a transaction go together in the next one
        burst = await asyncio.gather(*(s.take_slot("api:k1", 3) for s in [a] * 12 + [b] * 4))
        assert len([slot for slot in burst if slot]) == 3
        kept = asyncio.create_task(a.take_slot("api:k2", 2))
        gone = asyncio.create_task(a.take_slot("api:k2", 2))
        await asyncio.sleep(0)  # both are queued for the next transaction
        gone.cancel()
        assert await kept and (await asyncio.gather(gone, return_exceptions=True))[0].__class__ is asyncio.CancelledError
        assert await a.take_slot("api:k2", 2) is not None  # the slot taken for the caller that left was given back
        assert await b.take_slot("api:k2", 2) is None
    finally:
        await a.close()
        await b.close()


async def test_a_dead_process_turn_is_marked_and_its_thread_told(new_store, monkeypatch):
    now = time.time()
    a = new_store(clock=lambda: now)
    await a.open()
    later = now + lease.LEASE_SECONDS + 1
    events = Handover()  # the service's channel: the store publishes, a front end subscribes
    b = new_store(clock=lambda: later, events=events)
    try:
        cid = await a.get_or_create(KEY)
        await a.finish_turn(cid, await a.begin_turn(cid, "first", "U1"), done("first", "ok"))
        running = await a.begin_turn(cid, "a long video job", "U1")
        other = await a.get_or_create(OTHER)
        await a.finish_turn(other, await a.begin_turn(other, "fine", "U2"), done("fine", "all good"))
        await _forget_heartbeat(a)  # a's process stops beating (it hangs or was killed)
        told = []

        async def tell(marked):
            told.extend(marked)

        await b.open()
        events.on_interrupted(tell)
        assert await b.mark_interrupted() == 1
        assert told == [(KEY, running)]
        view = await b.turns(cid)
        assert [t["status"] for t in view] == ["ok", "failed"] and view[1]["error"] == lease.INTERRUPTED
        assert [t["status"] for t in await b.turns(other)] == ["ok"]  # nothing else is touched
        assert await b.mark_interrupted() == 0 and told == [(KEY, running)]  # told once
    finally:
        await b.close()
        await a.close()


async def _forget_heartbeat(store) -> None:
    """Stop a store's heartbeat task without closing it (as when its process hangs)."""
    task = store._heartbeat
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# -- SQLite: a schema-5 data dir upgrades in place -------------------------------------------------

async def test_schema_5_sqlite_data_dir_upgrades_in_place_and_keeps_everything(tmp_path):
    data = tmp_path / "data"
    (data / "media" / "cc").mkdir(parents=True)
    shutil.copy(ROOT / "tests/fixtures/store/conversations-v5.sqlite3", data / "conversations.sqlite3")
    photo = data / "media/cc/cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7.png"
    shutil.copy(MEDIA / "coffee.png", photo)
    async with sqlite_at(data, MediaStore(data)) as s:
        cid = await s.get_or_create(KEY)
        assert cid == "c681953bd5"
        (turn,) = await s.turns(cid)
        assert turn["answer"] == "A cup of coffee on a saucer." and turn["resources"][0]["id"] == "image-1"
        assert [r.path for r in await s.resources(cid)] == [photo]
        assert await s.take_rate("slack:U1", 1, 60.0) == 0.0  # a table of revision 0006
        t = await s.begin_turn(cid, "and now?", "U1")
        assert t == 1
    db = sqlite3.connect(data / "conversations.sqlite3")
    assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrate.HEAD,)]
    assert db.execute("PRAGMA user_version").fetchone() == (5,)
    assert db.execute("SELECT verdict FROM feedback").fetchall() == [("good",)]
    db.execute("UPDATE alembic_version SET version_num='9999'")  # a newer bot wrote it
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="newer version of the bot"):
        await sqlite_at(data, MediaStore(data)).open()


# -- PostgreSQL: bad URLs and databases are one sentence, nothing written ----------------------------

async def open_pg(url: str, tmp_path: Path, **kw) -> SQLStore:
    s = SQLStore(Database(url=url, connect_timeout=3.0), tmp_path / "data", MediaStore(tmp_path / "data"), **kw)
    await s.open()
    return s


@pytest.mark.parametrize("url, sentence", [
    ("mysql://u:p@127.0.0.1/db", "is not a PostgreSQL URL"),
    ("not a url at all", "is not a database URL"),
    ("postgresql://u:p@127.0.0.1:5432/", "names no database"),
])
async def test_a_wrong_database_url_is_one_sentence(tmp_path, url, sentence):
    with pytest.raises(StorageError) as e:
        await open_pg(url, tmp_path)
    assert sentence in e.value.user_message and ":p@" not in e.value.user_message


async def test_postgres_faults_are_one_sentence_without_the_password(tmp_path, postgres_server):
    from benchmarks.harness.realparts import free_port

    pw = postgres_server.password
    cases = [
        (postgres_server.url("postgres").replace(pw, "wrong-pw"), "refused the user name or password"),
        (postgres_server.url("no_such_db"), "does not exist"),
        (f"postgresql://hugginggpt:{pw}@127.0.0.1:{free_port()}/x", "cannot be reached"),
    ]
    for url, sentence in cases:
        with pytest.raises(StorageError) as e:
            await open_pg(url, tmp_path)
        msg = e.value.user_message
        assert sentence in msg and pw not in msg and "wrong-pw" not in msg, msg
        assert msg.count(". ") == 0 and msg.endswith(".")


async def test_read_only_newer_and_unmigrated_databases_are_refused_untouched(tmp_path, postgres_server):
    url = postgres_server.create_database()
    name = url.rsplit("/", 1)[1]
    with pytest.raises(StorageError, match="hugginggpt db upgrade"):
        await open_pg(url, tmp_path, upgrade=False)  # auto_migrate off: a fresh database is refused
    assert postgres_server.psql("SELECT count(*) FROM pg_tables WHERE schemaname='public'", name).stdout.strip() == "0"
    s = await open_pg(url, tmp_path)  # migrates
    await s.close()
    postgres_server.psql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    with pytest.raises(StorageError, match="read-only"):
        await open_pg(url, tmp_path)
    postgres_server.psql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = off')
    postgres_server.psql("UPDATE alembic_version SET version_num='9999'", name)
    with pytest.raises(StorageError, match="newer version of the bot"):
        await open_pg(url, tmp_path)
    assert postgres_server.psql("SELECT count(*) FROM owners", name).stdout.strip() == "0"  # nothing written


# -- the command line on PostgreSQL ----------------------------------------------------------------

def test_db_upgrade_then_bad_urls_exit_8_with_one_sentence(tmp_path, postgres_server):
    from tests.test_cli import hugginggpt, no_traceback

    url = postgres_server.create_database()
    pw = postgres_server.password
    p = hugginggpt(["db", "upgrade"], tmp_path, {"DATABASE_URL": url})
    no_traceback(p)
    every = ", ".join(r.revision for r in reversed(list(migrate.SCRIPTS.walk_revisions())))
    assert p.returncode == 0 and f"applied revisions {every}; now at {migrate.HEAD}" in p.stdout and pw not in p.stdout
    p = hugginggpt(["db", "upgrade"], tmp_path, {"DATABASE_URL": url})
    assert p.returncode == 0 and "is up to date" in p.stdout
    p = hugginggpt(["db", "upgrade"], tmp_path)  # no URL: the SQLite file
    assert p.returncode == 0 and "conversations.sqlite3: applied" not in p.stderr and "Migrated" in p.stdout
    fresh = postgres_server.create_database()
    for env, sentence in [
        ({"DATABASE_URL": url.replace(pw, "nope")}, "refused the user name or password"),
        ({"DATABASE_URL": fresh, "HUGGINGGPT_STORAGE__AUTO_MIGRATE": "false"}, "run `hugginggpt db upgrade`"),
    ]:
        p = hugginggpt(["run", "--sandbox", "Describe this picture", "--file", str(MEDIA / "coffee.png")], tmp_path, env)
        no_traceback(p)
        assert p.returncode == 8, p.stderr
        assert sentence in p.stderr and pw not in p.stderr + p.stdout
        said = [line for line in p.stderr.splitlines() if line.strip()]
        assert said[0].startswith("Starting:") and len(said) == 2, p.stderr  # run's start line, then one sentence


# -- the Handover channel: what the store finds of gone processes reaches the front ends ------------

async def test_interrupted_turns_found_before_a_front_end_subscribes_reach_it_once():
    events = Handover()
    await events.interrupted([(KEY, 3)])  # marked while the store opened, before any front end
    got: list = []
    broken_calls: list = []

    async def broken(marked):
        broken_calls.append(marked)
        raise RuntimeError("this front end failed")

    async def listener(marked):
        got.append(list(marked))

    events.on_interrupted(listener)
    await events.close()  # waits for the early delivery
    assert got == [[(KEY, 3)]]
    events.on_interrupted(broken)
    await events.interrupted([(OTHER, 0)])  # a failing subscriber is logged; the others still hear
    assert got == [[(KEY, 3)], [(OTHER, 0)]] and broken_calls == [[(OTHER, 0)]]


async def test_deliveries_of_a_gone_process_are_taken_only_by_a_subscribed_front_end(new_store):
    now = time.time()
    a = new_store(clock=lambda: now)
    await a.open()
    events = Handover()
    b = new_store(clock=lambda: now + lease.LEASE_SECONDS + 1, events=events)
    try:
        assert await a.claim_delivery(["slack:event:Ev1"], payload='{"event": "mention"}')
        assert await a.claim_delivery(["discord:message:42"], payload='{"message": 42}')
        await _forget_heartbeat(a)  # a dies before its turns begin
        await b.open()
        await b.mark_interrupted()  # sweeps a's owner row (its lease expired)
        assert await b.adopt_deliveries() == []  # no front end runs them here: nothing is taken
        ran: list = []

        async def run(adopted):
            ran.extend(adopted)

        events.on_redelivery("slack:", run)
        assert await b.adopt_deliveries() == [("slack:event:Ev1", '{"event": "mention"}')]
        assert ran == [("slack:event:Ev1", '{"event": "mention"}')]  # only its own platform's
        assert await b.adopt_deliveries() == [] and len(ran) == 1  # taken once
    finally:
        await b.close()
        await a.close()
