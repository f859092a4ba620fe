"""The conversation database behind SQLAlchemy engines: a SQLite file (the standard library's
driver, on threads: :mod:`bot.store.sql.threads`) or a PostgreSQL database (asyncpg, async engine), with driver errors mapped to one sentence naming it (never a
password), and the schema checked at open with one cheap query (Alembic is imported only when a
migration is due, :mod:`bot.store.sql.migrate`).

SQLite: one file in WAL mode; write transactions begin with ``BEGIN IMMEDIATE`` (as SQLAlchemy's
documentation advises for pysqlite/aiosqlite, "Serializable isolation / Savepoints /
Transactional DDL"), run on a thread of their own (:mod:`bot.store.sql.threads`) and are
serialised in the process by an asyncio lock (a write a request's answer waits for goes ahead of
it, see :meth:`Database.run`), so writers wait for each other here rather than in
SQLite's busy handler; reads run on a separate pool of read-only connections in autocommit
mode on threads of their own, so a slow write never delays reading another conversation.
SQLAlchemy's asyncio extension is imported only for PostgreSQL.
PostgreSQL: a pool per process, reads in autocommit mode (no BEGIN/ROLLBACK round trips).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, exc as sa_exc, text
from sqlalchemy.engine import URL, make_url

from ...errors import StorageError
from .errors import POOL_TIMEOUT, message
from .probes import DB_NAME
from .revisions import HEAD, REVISIONS, SQLITE_STATE, Refused, check_sqlite
from .dialect import Tx, sqlite_prebuilt
from .threads import SQLiteReader, SQLiteWriter, inline, read_all

if TYPE_CHECKING:  # the asyncio extension loads the ORM: imported when a PostgreSQL database opens
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)
R = TypeVar("R")

SCHEMES = {"postgresql", "postgres", "postgresql+asyncpg"}
"""URL schemes of ``[storage] database_url`` this store takes (``postgres://`` as Heroku writes it)."""


def parse_url(url: str) -> URL:
    """``[storage] database_url`` as a SQLAlchemy URL for the asyncpg driver.

    Raises:
        StorageError: not a URL, or not a PostgreSQL one (one sentence, password hidden).
    """
    hint = "write it as postgresql://USER:PASSWORD@HOST:5432/DATABASE"
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError):
        raise StorageError(f"[storage] database_url is not a database URL; {hint}.") from None
    if parsed.drivername not in SCHEMES:
        shown = parsed.render_as_string(hide_password=True)
        raise StorageError(f"[storage] database_url {shown} is not a PostgreSQL URL; {hint} (or leave it out to use SQLite).")
    if not parsed.database:
        raise StorageError(f"[storage] database_url names no database; {hint}.")
    return parsed.set(drivername="postgresql+asyncpg")


def describe(url: URL) -> str:
    """The database as messages name it: ``postgresql://user@host:port/name`` (no password)."""
    return url.set(drivername="postgresql", password=None).render_as_string(hide_password=True)


class Database:
    """The conversation database: ``Database(path=...)`` for a SQLite file, ``Database(url=...)``
    for PostgreSQL.

    Args:
        url: ``[storage] database_url`` (``postgresql://user:password@host:port/database``).
        path: the SQLite file (its directory is created at :meth:`open`).
        busy_timeout: SQLite: seconds to wait for a lock held by another process.
        connect_timeout: PostgreSQL: seconds to wait for a connection.
        pool_size: PostgreSQL: connections kept open per process.

    Attributes:
        name: the database for messages (the file, or the URL without password); path: the
            SQLite file (``None`` on PostgreSQL); dialect:
            ``"sqlite"`` or ``"postgresql"``; engine, reader: the engines once open; applied: the
            revisions the last :meth:`open` applied.
    """

    def __init__(self, *, url: str | None = None, path: Path | None = None, busy_timeout: float = 5.0,
                 connect_timeout: float = 10.0, pool_size: int = 10) -> None:
        self.path: Path | None = None
        if url is not None:
            self.url, self.dialect = parse_url(url), "postgresql"
            self.name = describe(self.url)
        elif path is not None:
            self.path = Path(path)
            self.url, self.dialect, self.name = make_url(f"sqlite:///{self.path}"), "sqlite", str(self.path)
        else:
            raise ValueError("a database URL or a SQLite path is needed")
        self.busy_timeout, self.connect_timeout, self.pool_size = busy_timeout, connect_timeout, pool_size
        self.engine: AsyncEngine | None = None
        self.reader: AsyncEngine | None = None
        self._writer: SQLiteWriter | None = None  # SQLite's engines, on threads of their own
        self._readers: SQLiteReader | None = None
        self.applied: list[str] = []
        self._lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._multi_hop = False  # a tx holds the SQLite writer's one connection across hops

    def error(self, exc: BaseException, action: str) -> StorageError:
        """Map a driver, connection or OS error to one sentence naming the database, and log it.

        Args:
            exc: a ``sqlalchemy.exc.DBAPIError`` (the driver's error in ``.orig``), an
                ``OSError`` or a timeout.
            action: what was being done, as a gerund phrase (``"saving a turn"``).
        """
        orig = getattr(exc, "orig", None) or exc
        cause = getattr(orig, "__cause__", None) or orig
        password = self.url.password if self.dialect == "postgresql" else None
        detail = str(cause).replace(password, "***") if password else str(cause)
        msg = message(self, orig, cause, detail, action)
        log.error("storage error while %s on %s: %s: %s", action, self.name, type(cause).__name__, detail)
        return StorageError(msg, f"{msg} ({type(cause).__name__}: {detail})")

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` has not run since."""
        return self.reader is not None or self._readers is not None

    def _engine(self) -> None:
        if not self.is_open:
            raise StorageError(f"The conversation database {self.name} is not open.")

    @asynccontextmanager
    async def tx(self, action: str) -> AsyncIterator[Tx]:
        """A write transaction, committed on exit, rolled back on any error or cancellation
        (SQLite: ``BEGIN IMMEDIATE`` on the writer thread, one at a time in this process). Never
        nest two.

        Yields:
            The connection: ``await conn.execute(statement)`` returns the rows, fetched.

        Raises:
            StorageError: the database failed (mapped by :meth:`error`).
        """
        self._engine()
        async with self._lock or contextlib.nullcontext():
            try:
                if self._writer is not None:
                    self._multi_hop = True
                    try:
                        async with self._writer.begin() as conn:
                            yield conn
                    finally:
                        self._multi_hop = False
                else:
                    async with self.engine.begin() as conn:  # type: ignore[union-attr]
                        yield conn
            except (sa_exc.DBAPIError, sa_exc.TimeoutError, OSError, asyncio.TimeoutError) as e:
                raise self.error(e, action) from None

    async def run(self, action: str, fn: Callable[..., R], *args: Any, durable: bool = True, first: bool = False,
                  **kwargs: Any) -> R:
        """``fn(connection, *args, **kwargs)`` as one write transaction on a synchronous
        SQLAlchemy ``Connection`` (SQLite: begun, run and committed in one hop to the writer
        thread; PostgreSQL: ``AsyncConnection.run_sync``); its result. For short transactions
        on the hot path; :meth:`tx` for the others. ``durable`` false: on SQLite its commit does
        not wait for the disk (:meth:`SQLiteWriter.transaction`). ``first``: a write a request's
        answer waits for before it starts (a run slot, a request count): on SQLite it goes to the
        writer thread at once, ahead of the writes waiting for the lock (runs' turns and files,
        which can come later), unless a multi-hop :meth:`tx` holds the one connection.

        Raises:
            StorageError: the database failed (mapped by :meth:`error`); whatever ``fn`` raised
                otherwise (the transaction rolled back).
        """
        self._engine()
        ahead = first and not self._multi_hop  # a one-hop job needs the connection only on the thread
        async with contextlib.nullcontext() if ahead or self._lock is None else self._lock:
            try:
                if self._writer is not None:
                    return await self._writer.transaction(fn, *args, durable=durable, **kwargs)
                async with self.engine.begin() as conn:  # type: ignore[union-attr]
                    return await conn.run_sync(fn, *args, **kwargs)
            except (sa_exc.DBAPIError, sqlite3.Error, sa_exc.TimeoutError, OSError, asyncio.TimeoutError) as e:
                raise self.error(e, action) from None

    async def atomic(self, action: str, afn: Callable[..., Awaitable[R]], *args: Any, durable: bool = True,
                     first: bool = False, **kwargs: Any) -> R:
        """``await afn(connection, *args, **kwargs)`` as one write transaction (a function of a
        :class:`~bot.store.sql.dialect.Tx` that awaits only ``execute``); its result. On SQLite the
        whole transaction is one hop to the writer thread (:func:`~bot.store.sql.threads.inline`)
        where :meth:`tx` takes one per statement, each waiting for the event loop: for short
        transactions on a request's path. ``durable``, ``first``: as for :meth:`run`.

        Raises:
            StorageError: the database failed (mapped by :meth:`error`); whatever ``afn`` raised
                otherwise (the transaction rolled back).
        """
        if self._writer is None:
            async with self.tx(action) as conn:
                return await afn(conn, *args, **kwargs)
        return await self.run(action, inline, afn, *args, durable=durable, first=first, **kwargs)

    async def read(self, action: str, *stmts: Any, params: dict[str, Any] | None = None) -> Any:
        """All rows of each query on one pooled read connection in autocommit mode (each query
        sees what was committed when it starts). A connection the server dropped (a restart, a
        failover) is invalidated by SQLAlchemy and the queries are tried once more on a fresh one
        (instead of ``pool_pre_ping``, whose round trip per checkout tripled a chat-log load).

        Args:
            action: what is being done, for the error sentence; stmts: the queries; params:
                values of their ``bindparam`` placeholders (prebuilt statements compile once).

        Returns:
            The rows of the one query, or a list of row lists for several.

        Raises:
            StorageError: the database failed (mapped by :meth:`error`).
        """
        self._engine()
        if self._readers is not None:
            try:
                if params is None:
                    out = await self._readers.call(read_all, stmts)
                else:
                    out = await self._readers.fetch([sqlite_prebuilt(self._readers.engine, s, params) for s in stmts])
            except (sa_exc.DBAPIError, sqlite3.Error, OSError) as e:
                raise self.error(e, action) from None
            return out[0] if len(out) == 1 else out
        for attempt in (1, 2):
            try:
                async with self.reader.connect() as conn:  # type: ignore[union-attr]
                    out = [list((await conn.execute(stmt, params)).all()) for stmt in stmts]
                    return out[0] if len(out) == 1 else out
            except sa_exc.DBAPIError as e:
                if attempt == 1 and e.connection_invalidated:
                    log.warning("%s: connection lost (%s); retrying on a new one", self.name, type(e.orig).__name__)
                    continue
                raise self.error(e, action) from None
            except (sa_exc.TimeoutError, OSError, asyncio.TimeoutError) as e:
                raise self.error(e, action) from None
        raise AssertionError("unreachable")

    async def open(self, *, upgrade: bool = True) -> list[str]:
        """Connect, refuse another program's or a newer database, and apply pending migrations
        (``upgrade``) or refuse a database that needs them; idempotent.

        Returns:
            The revisions applied (``[]`` when already current).

        Raises:
            StorageError: unreachable, wrong credentials, missing database, read-only, corrupt,
                locked, from a newer version of the bot, or behind with ``upgrade=False``
                (nothing is written then).
        """
        if self.is_open:
            return []
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise self.error(e, "creating the data directory") from None
        self._engines()
        try:
            self.applied = [] if await self._current() else await self._migrate(upgrade)
        except BaseException as e:
            await self.close()
            if isinstance(e, (sa_exc.DBAPIError, sa_exc.TimeoutError, OSError, asyncio.TimeoutError)):
                raise self.error(e, "opening") from None
            raise
        for rev in self.applied:
            log.info("%s: migrated to revision %s", self.name, rev)
        return self.applied

    def _engines(self) -> None:
        """Make the write and read engines (SQLite: a writer thread and a read-only pool)."""
        if self.dialect == "postgresql":
            from sqlalchemy.ext.asyncio import create_async_engine

            self.engine = create_async_engine(
                self.url, pool_size=self.pool_size, max_overflow=self.pool_size * 2, pool_timeout=POOL_TIMEOUT,
                connect_args={"timeout": self.connect_timeout, "server_settings": {"application_name": "hugginggpt"}},
            )
            self.reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")
            return
        self._writer = SQLiteWriter(self.url, self.busy_timeout, _sqlite_writer)
        self._readers = SQLiteReader(self.url, self.busy_timeout, _sqlite_reader)

    async def _current(self) -> bool:
        """Whether the schema is at :data:`HEAD`, by one query on the read pool (no Alembic); a
        SQLite file without a version table is checked (another program's? newer?) before
        anything is written to it.

        Raises:
            StorageError: another program's SQLite file, or a newer legacy one.
        """
        if self._readers is not None:
            rows, state = await self._readers.call(_schema_state)
        else:
            async with self.reader.connect() as conn:  # type: ignore[union-attr]
                rows, state = await conn.run_sync(_schema_state)
        if state is not None:
            try:
                check_sqlite(*state)
            except Refused as e:
                raise StorageError(e.sentence(self.name)) from None
        return bool(rows) and rows[0][0] == HEAD

    async def _migrate(self, upgrade: bool) -> list[str]:
        """Check and migrate under the migration lock, in one transaction (Alembic)."""
        from . import migrate

        try:
            async with self.tx("migrating") as conn:
                return await conn.run_sync(migrate.upgrade, apply=upgrade)
        except Refused as e:
            raise StorageError(e.sentence(self.name)) from None

    async def close(self) -> None:
        """Close every pooled connection; safe to call twice."""
        engines, self.engine, self.reader = (self.reader, self.engine), None, None
        threads, self._writer, self._readers = (self._writer, self._readers), None, None
        for engine in engines:
            if engine is not None:
                await engine.dispose()
        for pool in threads:
            if pool is not None:
                await pool.dispose()


def _schema_state(conn: Connection) -> tuple[list[Any], tuple[int, int, bool] | None]:
    """The ``alembic_version`` rows, and on SQLite without them the file's state as
    :func:`~bot.store.sql.revisions.check_sqlite` takes it (``user_version``, tables, versioned)."""
    try:
        rows = list(conn.execute(text("SELECT version_num FROM alembic_version")).all())
    except sa_exc.DBAPIError as e:
        if "alembic_version" not in str(e.orig):
            raise
        rows = []
    if rows or conn.dialect.name != "sqlite":
        return rows, None
    version, tables, versioned = conn.execute(text(SQLITE_STATE)).one()
    return rows, (int(version), int(tables), bool(versioned))


def _pragmas(dbapi_connection: Any, *statements: str) -> list[Any]:
    cursor, rows = dbapi_connection.cursor(), []
    try:
        for statement in statements:
            cursor.execute(statement)
            rows.append(cursor.fetchall())
        return rows
    finally:
        cursor.close()


def _sqlite_writer(dbapi_connection: Any, _record: Any) -> None:
    """A new SQLite writer connection: autocommit at the driver (the store sends ``BEGIN
    IMMEDIATE`` itself), WAL mode, full fsync, foreign keys enforced."""
    dbapi_connection.isolation_level = None
    mode = _journal_wal(dbapi_connection)
    _pragmas(dbapi_connection, "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON")
    if str(mode).lower() != "wal":
        log.warning("SQLite journal mode is %s, not WAL", mode)


def _journal_wal(dbapi_connection: Any) -> str:
    """``PRAGMA journal_mode=WAL`` on ``dbapi_connection``; returns the mode it reports. Switching
    a new file to WAL takes its lock, and SQLite answers "database is locked" at once there, without
    its busy handler: two processes creating the file together (replicas started at once) had one
    of them refuse to start. Retried within the connection's busy timeout (tenacity)."""
    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

    (wait_ms,), = _pragmas(dbapi_connection, "PRAGMA busy_timeout")[0]
    for attempt in Retrying(stop=stop_after_delay(wait_ms / 1000), wait=wait_fixed(0.02), reraise=True,
                            retry=retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError)
                                                     and "locked" in str(e))):
        with attempt:
            (mode,), = _pragmas(dbapi_connection, "PRAGMA journal_mode=WAL")[0]
    return str(mode)


def _sqlite_reader(dbapi_connection: Any, _record: Any) -> None:
    """A new SQLite read connection: autocommit (each query sees the latest commit), read-only."""
    dbapi_connection.isolation_level = None
    _pragmas(dbapi_connection, "PRAGMA query_only=ON")


__all__ = ["DB_NAME", "Database", "REVISIONS", "describe", "parse_url"]
