"""SQLite on threads: the standard library's driver (SQLAlchemy's ``pysqlite`` dialect) with
synchronous SQLAlchemy engines, each call one hop to a thread pool.

Why not SQLAlchemy's asyncio extension with aiosqlite: its adapter takes one hop to aiosqlite's
thread for each step of a cursor (open, execute, fetch, close), so a two-transaction turn
(``begin_turn`` + ``finish_turn``) took about thirty hops and four times as long as the
hand-written store it replaced (``python -m benchmarks.bench_store``), and importing the
extension (it loads the ORM) made every start slower. Here:

* writes (:class:`SQLiteWriter`): one connection on one thread; a statement, its rows and its
  cursor are one hop, ``BEGIN IMMEDIATE`` and ``COMMIT`` one each, and the hottest writes (a
  turn's) run a whole transaction of synchronous code in one hop
  (:meth:`SQLiteWriter.transaction`). The connection is opened, used and closed only on that
  thread; rows are fetched there (:class:`Fetched`), so the event loop never touches the driver;
* reads (:class:`SQLiteReader`): read-only connections in autocommit mode on a few threads, all
  of a call's queries on one connection in one hop; the chat log's queries, built once, run as
  SQL compiled once on one connection kept on a thread of its own (the driver's own cursor: no
  pool checkout, no SQLAlchemy row objects), as fast as the hand-written store's reads.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, Dialect, Row
from sqlalchemy.exc import MultipleResultsFound, NoResultFound

R = TypeVar("R")


class SQLiteWriter:
    """The SQLite write engine (one pooled connection) and the thread that uses it.

    Args:
        url: a ``sqlite:///PATH`` URL (any driver name; ``pysqlite`` is used).
        busy_timeout: seconds to wait for a lock another process holds (the driver's ``timeout``).
        on_connect: called with each new DB-API connection (pragmas); runs on the writer thread.
    """

    def __init__(self, url: URL, busy_timeout: float, on_connect: Callable[[Any, Any], None]) -> None:
        # no reset when a connection returns to the pool: every transaction ends by COMMIT or ROLLBACK
        self.engine: Engine = create_engine(url.set(drivername="sqlite+pysqlite"), pool_size=1, max_overflow=0,
                                            pool_reset_on_return=None, connect_args={"timeout": busy_timeout})
        event.listen(self.engine, "connect", on_connect)
        # on the driver's own cursor: SQLAlchemy's execution of it cost 20 us of CPU a transaction
        event.listen(self.engine, "begin", lambda conn: conn.connection.driver_connection.execute("BEGIN IMMEDIATE"))
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")

    async def call(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)`` on the writer thread; its result or its exception."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(fn, *args, **kwargs))

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[ThreadConnection]:
        """A write transaction (``BEGIN IMMEDIATE``), committed on exit, rolled back on any error
        or cancellation (the rollback runs to its end even when the caller is cancelled).

        Raises:
            sqlalchemy.exc.DBAPIError: the driver failed (locked, full, corrupt...).
        """
        handover = _Handover(self.engine)
        try:
            conn = await self.call(handover.begin)
        except asyncio.CancelledError:  # the thread may still be beginning it (waiting for another process's lock)
            handover.abandon()
            raise
        try:
            yield ThreadConnection(conn, self)
        except BaseException:
            await asyncio.shield(self.call(_end, conn, commit=False))
            raise
        await asyncio.shield(self.call(_end, conn, commit=True))

    async def transaction(self, fn: Callable[..., R], *args: Any, durable: bool = True, **kwargs: Any) -> R:
        """``fn(connection, *args, **kwargs)`` as one write transaction, begun, run and committed
        in one hop to the writer thread (rolled back if ``fn`` raises); its result. A cancelled
        caller does not stop it: the transaction ends on the thread either way. ``durable``
        false: its commit does not wait for the disk (``PRAGMA synchronous=NORMAL`` for it; WAL
        keeps it atomic, and the next durable commit makes it durable too), about 0.1 ms of CPU
        less; a power loss before then loses it.

        Raises:
            sqlalchemy.exc.DBAPIError: the driver failed; whatever ``fn`` raised.
        """
        return await self.call(_transaction, self.engine, fn, args, kwargs, durable)

    async def dispose(self) -> None:
        """Close the connection (on its thread) and stop the thread; safe to call twice."""
        await self.call(self.engine.dispose)
        self._thread.shutdown(wait=False)


class SQLiteReader:
    """Read-only SQLite connections (autocommit: each query sees the latest commit) used from a
    few threads.

    Args:
        url: a ``sqlite:///PATH`` URL (any driver name; ``pysqlite`` is used).
        busy_timeout: seconds to wait for a lock another process holds (the driver's ``timeout``).
        on_connect: called with each new DB-API connection (``query_only``).
        threads: threads, and connections, reading at once.
    """

    def __init__(self, url: URL, busy_timeout: float, on_connect: Callable[[Any, Any], None], threads: int = 4) -> None:
        # SQLAlchemy turns the driver's check_same_thread off for a file: a connection serves any thread;
        # one connection per thread, and the one the hot thread keeps
        self.engine: Engine = create_engine(url.set(drivername="sqlite+pysqlite"), pool_size=threads + 1,
                                            max_overflow=0, pool_reset_on_return=None,
                                            connect_args={"timeout": busy_timeout})
        event.listen(self.engine, "connect", on_connect)
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="sqlite-reader")
        self._hot = ThreadPoolExecutor(1, thread_name_prefix="sqlite-hot-reader")
        self._hot_conn: Any = None  # a pooled DB-API connection, used only on the hot thread

    async def fetch(self, queries: list[tuple[str, list[Any]]]) -> list[list[tuple[Any, ...]]]:
        """The rows of each ``(sql, arguments)`` (SQLite SQL, qmark style) on the kept connection.

        Raises:
            sqlite3.Error: the driver failed.
        """
        return await asyncio.get_running_loop().run_in_executor(self._hot, self._fetch, queries)

    def _fetch(self, queries: list[tuple[str, list[Any]]]) -> list[list[tuple[Any, ...]]]:
        if self._hot_conn is None:
            self._hot_conn = self.engine.raw_connection()
        cursor = self._hot_conn.cursor()
        try:
            return [cursor.execute(sql, args).fetchall() for sql, args in queries]
        finally:
            cursor.close()

    def _close_hot(self) -> None:
        conn, self._hot_conn = self._hot_conn, None
        if conn is not None:
            conn.close()

    async def call(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(connection, *args)`` with a pooled read connection, on a reader thread; its result.

        Raises:
            sqlalchemy.exc.DBAPIError: the driver failed; whatever ``fn`` raised.
        """
        return await asyncio.get_running_loop().run_in_executor(self._threads, _with_connection, self.engine, fn, args)

    async def dispose(self) -> None:
        """Close the pooled connections and stop the threads; safe to call twice."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._hot, self._close_hot)
        await loop.run_in_executor(self._threads, self.engine.dispose)
        self._threads.shutdown(wait=False)
        self._hot.shutdown(wait=False)


class InlineConnection:
    """A connection of :class:`SQLiteWriter` inside a transaction on the writer thread, with the
    async face of ``AsyncConnection`` that the store uses (:class:`~bot.store.sql.dialect.Tx`),
    whose ``execute`` never suspends: an async function of a ``Tx`` then runs to its end in one
    hop (:func:`inline`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def dialect(self) -> Dialect:
        """The connection's SQLAlchemy dialect (``name == "sqlite"``)."""
        return self._conn.dialect

    async def execute(self, statement: Any) -> Fetched:
        """Run ``statement`` now, on this thread; its rows, already fetched.

        Raises:
            sqlalchemy.exc.DBAPIError: the driver failed.
        """
        return _buffered(self._conn, statement)


class ThreadConnection(InlineConnection):
    """A connection of :class:`SQLiteWriter` inside its transaction, used from the event loop:
    each statement is one hop to the writer thread."""

    def __init__(self, conn: Connection, writer: SQLiteWriter) -> None:
        super().__init__(conn)
        self._writer = writer

    async def execute(self, statement: Any) -> Fetched:
        """Run ``statement`` on the writer thread; its rows, already fetched.

        Raises:
            sqlalchemy.exc.DBAPIError: the driver failed.
        """
        return await self._writer.call(_buffered, self._conn, statement)

    async def run_sync(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(connection, *args, **kwargs)`` with the sync connection, on the writer thread (as
        ``AsyncConnection.run_sync``)."""
        return await self._writer.call(fn, self._conn, *args, **kwargs)


def inline(conn: Connection, afn: Callable[..., Coroutine[Any, Any, R]], *args: Any, **kwargs: Any) -> R:
    """``await afn(InlineConnection(conn), *args, **kwargs)`` driven to its end on this thread,
    for :meth:`SQLiteWriter.transaction`: a transaction of several statements written once for
    both databases costs one hop instead of one per statement.

    Raises:
        RuntimeError: ``afn`` awaited something that suspends (only ``execute`` may be awaited);
            whatever ``afn`` raised.
    """
    coro = afn(InlineConnection(conn), *args, **kwargs)
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError(f"{getattr(afn, '__qualname__', afn)} suspended inside a one-hop transaction")


def _begin(engine: Engine) -> Connection:
    conn = engine.connect()
    try:
        conn.begin()
    except BaseException:
        conn.close()
        raise
    return conn


class _Handover:
    """A transaction begun on the writer thread for a caller that may leave (be cancelled) while
    the thread still waits for another process's lock. Left open it would hold the one pooled
    connection (every later write would wait for the pool) or go back to the pool inside its
    transaction ("cannot start a transaction within a transaction"): whichever of the two sides
    comes second ends it, the thread at once, or the caller on its own thread (the writer thread is
    then at most waiting for that pooled connection, not using it)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._left = False
        self._conn: Connection | None = None

    def begin(self) -> Connection:
        """On the writer thread: begin, and hand the connection over unless the caller left."""
        conn = _begin(self.engine)
        with self._lock:
            if not self._left:
                self._conn = conn
                return conn
        _end(conn, commit=False)
        return conn

    def abandon(self) -> None:
        """The caller left: end a transaction already handed over (else the thread ends it)."""
        with self._lock:
            self._left, conn = True, self._conn
        if conn is not None:
            _end(conn, commit=False)


def _end(conn: Connection, *, commit: bool) -> None:
    try:
        if commit:
            conn.commit()
        else:
            conn.rollback()
    finally:
        conn.close()


class Fetched:
    """The rows of one statement, fetched on the writer thread: the part of SQLAlchemy's
    ``Result`` the store's statements use (``all``, ``first``, ``one``, ``scalar``, with
    ``Result``'s meaning). SQLAlchemy's own buffered result (``Result.freeze``) doubled the time
    of a 300,000-row read (the retention pass) by building every row twice."""

    def __init__(self, rows: list[Row[Any]]) -> None:
        self._rows = rows

    def all(self) -> list[Row[Any]]:
        """Every row."""
        return self._rows

    def first(self) -> Row[Any] | None:
        """The first row, or ``None`` when there is none."""
        return self._rows[0] if self._rows else None

    def one(self) -> Row[Any]:
        """The only row.

        Raises:
            sqlalchemy.exc.NoResultFound: no row; sqlalchemy.exc.MultipleResultsFound: several.
        """
        if len(self._rows) != 1:
            raise (NoResultFound if not self._rows else MultipleResultsFound)(f"{len(self._rows)} rows, one expected")
        return self._rows[0]

    def scalar(self) -> Any:
        """The first column of the first row, or ``None`` when there is no row."""
        return self._rows[0][0] if self._rows else None


def _buffered(conn: Connection, statement: Any) -> Fetched:
    result = conn.execute(statement)
    return Fetched(result.all() if result.returns_rows else [])


def _with_connection(engine: Engine, fn: Callable[..., R], args: tuple[Any, ...]) -> R:
    with engine.connect() as conn:
        return fn(conn, *args)


def read_all(conn: Connection, stmts: tuple[Any, ...]) -> list[list[Row[Any]]]:
    """The rows of each of ``stmts`` on ``conn``."""
    return [list(conn.execute(stmt).all()) for stmt in stmts]


def _transaction(engine: Engine, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any],
                 durable: bool) -> R:
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        if not durable:  # the safety level may not change inside a transaction
            driver.execute("PRAGMA synchronous=NORMAL")
        try:
            with conn.begin():  # BEGIN IMMEDIATE (the "begin" event); COMMIT, or ROLLBACK on an error
                return fn(conn, *args, **kwargs)
        finally:
            if not durable:
                driver.execute("PRAGMA synchronous=FULL")
