"""The SQLite writer thread (bot.store.sql.threads.SQLiteWriter) when a transaction's caller is
cancelled while the thread is still beginning it (waiting for another process's write lock): the
transaction it then opens is rolled back, so the one pooled connection is free for the next write.
And a one-hop transaction written as an async function (threads.inline) that would suspend."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from sqlalchemy import text
from sqlalchemy.engine import URL

from bot.store.sql.threads import SQLiteWriter, inline


async def test_a_write_cancelled_while_waiting_for_the_lock_leaves_the_writer_usable(tmp_path):
    path = tmp_path / "db.sqlite3"
    sqlite3.connect(path).execute("CREATE TABLE t (x INTEGER)").connection.commit()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    writer = SQLiteWriter(URL.create("sqlite", database=str(path)), busy_timeout=5.0, on_connect=lambda *_: None)
    try:
        async def write() -> None:
            async with writer.begin() as conn:
                raise AssertionError("the write went on after its caller was cancelled")

        waiting = asyncio.create_task(write())
        await asyncio.sleep(0.3)  # the writer thread is in BEGIN IMMEDIATE, waiting for the lock
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert waiting.cancelled()
        other.execute("COMMIT")  # the lock is free: the thread's BEGIN goes through for nobody

        def insert(conn) -> int:
            conn.exec_driver_sql("INSERT INTO t VALUES (2)")
            return conn.exec_driver_sql("SELECT count(*) FROM t").scalar()

        assert await asyncio.wait_for(writer.transaction(insert), timeout=10) == 1  # not the pool's 30 s wait
        assert other.execute("SELECT x FROM t").fetchall() == [(2,)]  # nothing of the cancelled write
    finally:
        other.close()
        await writer.dispose()


async def test_a_one_hop_transaction_that_would_suspend_is_refused_and_rolled_back(tmp_path):
    path = tmp_path / "db.sqlite3"
    sqlite3.connect(path).execute("CREATE TABLE t (x INTEGER)").connection.commit()
    writer = SQLiteWriter(URL.create("sqlite", database=str(path)), busy_timeout=5.0, on_connect=lambda *_: None)
    try:
        async def two_rows(conn) -> int:
            await conn.execute(text("INSERT INTO t VALUES (1)"))
            await conn.execute(text("INSERT INTO t VALUES (2)"))
            return (await conn.execute(text("SELECT count(*) FROM t"))).scalar()

        async def suspends(conn) -> None:
            await conn.execute(text("INSERT INTO t VALUES (3)"))
            await asyncio.sleep(0)  # not a statement: the thread cannot wait for the event loop

        assert await writer.transaction(inline, two_rows) == 2
        with pytest.raises(RuntimeError, match="suspended inside a one-hop transaction"):
            await writer.transaction(inline, suspends)
        assert sqlite3.connect(path).execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,)]
    finally:
        await writer.dispose()


async def test_a_write_that_goes_first_waits_for_a_multi_hop_transaction_holding_the_connection(tmp_path):
    from bot.store.sql.database import Database
    from bot.store.sql.schema import owners

    db = Database(path=tmp_path / "db.sqlite3")
    await db.open()
    order: list[str] = []

    async def first_write(conn) -> None:
        await conn.execute(owners.delete())
        order.append("first")

    try:
        async with db.tx("a long transaction") as conn:
            await conn.execute(owners.delete())
            ahead = asyncio.create_task(db.atomic("a run slot", first_write, first=True))
            await asyncio.sleep(0.2)  # queued on the writer thread now, it would wait for the one connection
            await conn.execute(owners.delete())  # ... and this hop behind it: a deadlock until the pool times out
            order.append("tx")
        await asyncio.wait_for(ahead, timeout=10)
        assert order == ["tx", "first"]
        await asyncio.wait_for(db.atomic("a run slot", first_write, first=True), timeout=10)  # no transaction open: at once
    finally:
        await db.close()
