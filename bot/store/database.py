"""One SQLite file in WAL mode behind two ``aiosqlite`` connections, with driver errors mapped to
one sentence naming the file.

Used by :class:`bot.store.sqlite.SQLiteStore` (queries) and :mod:`bot.store.retention` (deletes);
the schema comes from :mod:`bot.store.migrations`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
from importlib import resources
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite

from ..errors import StorageError
from . import migrations
from .sql.revisions import HEAD, REVISIONS

log = logging.getLogger(__name__)


class Database:
    """A conversation database file: one writer connection (transactions serialised by
    :attr:`lock`, ``BEGIN IMMEDIATE`` against other processes) and one read-only connection, so
    a slow write never delays reading another conversation.

    Args:
        path: the database file (created on :meth:`open` if missing; its directory must exist).
        busy_timeout: seconds to wait for a lock held by another process before
            :class:`StorageError`.

    Attributes:
        lock: hold it around every write transaction (:meth:`tx`) and around reads that decide
            a write.
    """

    def __init__(self, path: Path, *, busy_timeout: float = 5.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.lock = asyncio.Lock()
        self._db: aiosqlite.Connection | None = None
        self._rdb: aiosqlite.Connection | None = None
        self.applied: list[str] = []
        """Alembic revisions the last :meth:`open` applied, oldest first."""

    @property
    def writer(self) -> aiosqlite.Connection:
        """The writer connection (autocommit mode: open transactions with :meth:`tx`).

        Raises:
            StorageError: the database is not open.
        """
        return self._conn()[0]

    def error(self, exc: BaseException, action: str) -> StorageError:
        """Map a driver or OS error to one sentence for the user naming the file, and log it.

        Args:
            exc: the ``sqlite3.Error`` or ``OSError``.
            action: what was being done, as a gerund phrase (``"saving a turn"``).

        Returns:
            The :class:`StorageError` to raise (disk full, locked, corrupt, not writable, other).
        """
        text = str(exc)
        low = text.lower()
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "disk is full" in low:
            msg = f"The conversation store {self.path} cannot be written while {action}: the disk is full."
        elif "locked" in low or "busy" in low:
            msg = (
                f"The conversation database {self.path} is locked by another process"
                f" (waited {self.busy_timeout:g} s while {action})."
            )
        elif "not a database" in low or "malformed" in low or "corrupt" in low:
            msg = f"The conversation database {self.path} is corrupt or not a SQLite database."
        elif "unable to open" in low or isinstance(exc, PermissionError) or "readonly" in low:
            msg = f"The conversation database {self.path} cannot be opened or written (check the data directory)."
        else:
            msg = f"The conversation database {self.path} failed while {action}."
        log.error("storage error while %s on %s: %s: %s", action, self.path, type(exc).__name__, text)
        return StorageError(msg, f"{msg} ({type(exc).__name__}: {text})")

    def _conn(self) -> tuple[aiosqlite.Connection, aiosqlite.Connection]:
        if self._db is None or self._rdb is None:
            raise StorageError(f"The conversation database {self.path} is not open.")
        return self._db, self._rdb

    @asynccontextmanager
    async def tx(self, action: str) -> AsyncIterator[aiosqlite.Connection]:
        """A write transaction on the writer connection (caller holds :attr:`lock`); committed
        on exit, rolled back on any error (also on cancellation).

        Raises:
            StorageError: ``sqlite3.Error`` inside, mapped by :meth:`error`.
        """
        db, _ = self._conn()
        try:
            await db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise self.error(e, action) from None
        try:
            yield db
            await db.execute("COMMIT")
        except BaseException as e:
            try:
                await asyncio.shield(db.execute("ROLLBACK"))
            except sqlite3.Error:
                pass
            if isinstance(e, sqlite3.Error):
                raise self.error(e, action) from None
            raise

    async def read(self, action: str, sql: str, args: tuple[Any, ...] | list[Any] = ()) -> list[Any]:
        """All rows of a query on the read-only connection.

        Raises:
            StorageError: not open, or ``sqlite3.Error`` mapped by :meth:`error`.
        """
        _, rdb = self._conn()
        try:
            return list(await rdb.execute_fetchall(sql, args))
        except sqlite3.Error as e:
            raise self.error(e, action) from None

    async def open(self) -> None:
        """Open the file, refuse foreign or newer files, switch to WAL mode, apply pending
        migrations (:func:`bot.store.migrations.upgrade`); idempotent.

        Raises:
            StorageError: the file is corrupt, not SQLite, another program's database, from a
                newer version, or locked by another process beyond ``busy_timeout``.
        """
        if self._db is not None:
            return
        db = rdb = None
        try:
            db = await aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            version = await migrations.check_version(db, self.path)
            (mode,) = await (await db.execute("PRAGMA journal_mode=WAL")).fetchone()
            if str(mode).lower() != "wal":
                log.warning("%s: journal mode is %s, not WAL", self.path, mode)
            await db.execute("PRAGMA synchronous=FULL")
            await db.execute("PRAGMA foreign_keys=ON")
            await migrations.upgrade(db, self.path, version)
            applied = await self._alembic(db, fresh=version == 0)
            self.applied = applied
            rdb = await aiosqlite.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            await rdb.execute("PRAGMA query_only=ON")
            await rdb.execute_fetchall("SELECT count(*) FROM conversations")
        except BaseException as e:
            for c in (rdb, db):
                if c is not None:
                    try:
                        await c.close()
                    except Exception:  # noqa: BLE001 - already failing
                        pass
            if isinstance(e, sqlite3.Error):
                raise self.error(e, "opening") from None
            raise
        self._db, self._rdb = db, rdb

    async def _alembic(self, db: aiosqlite.Connection, *, fresh: bool) -> list[str]:
        """Apply the Alembic revisions after schema version 5 (shared with PostgreSQL,
        :mod:`bot.store.sql.migrate`). Alembic is imported only to upgrade an existing file: a file
        created just now gets the same SQL from ``sqlite_head.sql`` (Alembic's own output, checked
        by the tests), which keeps a first ``hugginggpt run`` about a second faster.

        Raises:
            StorageError: the file is at a revision this bot does not know (a newer bot's), or
                SQLite failed while migrating.
        """
        rows = await db.execute_fetchall("SELECT name FROM sqlite_master WHERE type='table' AND name='alembic_version'")
        current = (await db.execute_fetchall("SELECT version_num FROM alembic_version"))[0][0] if rows else None
        if current is not None and current not in REVISIONS:
            raise StorageError(f"The conversation database {self.path} was written by a newer version of the bot"
                               f" (revision {current}, this one knows {HEAD}).")
        if current == HEAD:
            return []
        if current is None and fresh:
            return await self._create_head(db)
        from sqlalchemy import exc as sa_exc

        from .sql import migrate

        try:
            applied = await migrate.upgrade_sqlite(self.path, self.busy_timeout)
        except migrate.NewerSchema as e:  # written meanwhile by a newer bot
            raise StorageError(f"The conversation database {self.path} was written by a newer version of the bot"
                               f" (revision {e.args[0]}, this one knows {HEAD}).") from None
        except sa_exc.DBAPIError as e:
            raise self.error(e.orig if isinstance(e.orig, Exception) else e, "migrating") from None
        for rev in applied:
            log.info("%s: migrated to revision %s", self.path, rev)
        return applied

    async def _create_head(self, db: aiosqlite.Connection) -> list[str]:
        """Run ``sqlite_head.sql`` on a file just brought to schema 5, in one ``BEGIN IMMEDIATE``
        transaction (skipped if another process did it meanwhile)."""
        script = migrations.Migration(0, "sqlite_head.sql", resources.files("bot.store.sql").joinpath(
            "sqlite_head.sql").read_text(encoding="utf-8"))
        async with migrations.immediate(db):
            done = await db.execute_fetchall("SELECT 1 FROM sqlite_master WHERE name='alembic_version'")
            for statement in [] if done else script.statements():
                await db.execute(statement)
        return [] if done else list(REVISIONS)

    async def close(self) -> None:
        """Close both connections (SQLite checkpoints the WAL); safe to call twice."""
        db, rdb, self._db, self._rdb = self._db, self._rdb, None, None
        for c in (rdb, db):
            if c is not None:
                try:
                    await c.close()
                except sqlite3.Error as e:
                    log.warning("closing %s: %s", self.path, e)
