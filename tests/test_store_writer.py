"""The SQLite writer thread (bot.store.sql.threads.SQLiteWriter) when a transaction's caller is
cancelled while the thread is still beginning it (waiting for another process's write lock): the
transaction it then opens is rolled back, so the one pooled connection is free for the next write."""

from __future__ import annotations

import asyncio
import sqlite3

from sqlalchemy.engine import URL

from bot.store.sql.threads import SQLiteWriter


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
