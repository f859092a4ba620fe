"""Where SQLite and PostgreSQL differ, as a few named functions; every other statement of the store
is plain SQLAlchemy Core that both compile.

Concurrency is the main difference. PostgreSQL locks rows (``SELECT ... FOR UPDATE``), skips rows
another transaction holds (``SKIP LOCKED``) and serialises by advisory transaction locks. SQLite has
one writer at a time: every write transaction of the store begins with ``BEGIN IMMEDIATE``
(:mod:`bot.store.sql.database`), which already excludes every other writer, in this process and
in others on the same file, so the row and advisory locks are not needed there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, Select, Table, func, select
from sqlalchemy.engine import Dialect

from .threads import Fetched

R = TypeVar("R")


class Tx(Protocol):
    """What the store's statements need of a connection in a write transaction: SQLAlchemy's
    ``AsyncConnection`` (PostgreSQL) or :class:`bot.store.sql.threads.ThreadConnection` (SQLite),
    whose ``execute`` returns the rows already fetched (``all``, ``first``, ``one``, ``scalar``)."""

    @property
    def dialect(self) -> Dialect: ...

    async def execute(self, statement: Any) -> Any: ...

    async def run_sync(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R: ...


RETENTION_LOCK = 0x48474755
"""Advisory lock id held while deciding what to delete (one pruner at a time; PostgreSQL)."""
MIGRATION_LOCK = 0x48474754
"""Advisory lock id held while migrating (PostgreSQL)."""


def is_sqlite(conn: Tx | Connection) -> bool:
    """Whether ``conn`` is a connection to SQLite (else PostgreSQL)."""
    return conn.dialect.name == "sqlite"


def insert(conn: Tx | Connection, table: Table) -> Any:
    """An ``INSERT`` of the connection's dialect, with ``on_conflict_do_nothing`` /
    ``on_conflict_do_update`` (both dialects write ``INSERT ... ON CONFLICT``). Only the dialect in
    use is imported (the other one costs start-up time for nothing)."""
    if is_sqlite(conn):
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    else:
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    return dialect_insert(table)


def upsert(conn: Tx, table: Table, values: dict[str, Any], keys: list[Any], update: dict[str, Any]) -> Any:
    """``INSERT values ... ON CONFLICT (keys) DO UPDATE SET update``."""
    return insert(conn, table).values(**values).on_conflict_do_update(index_elements=keys, set_=update)


def greatest(conn: Tx, a: Any, b: Any) -> ColumnElement[Any]:
    """The larger of two values: ``greatest(a, b)`` (PostgreSQL), the scalar ``max(a, b)`` (SQLite)."""
    return func.max(a, b) if is_sqlite(conn) else func.greatest(a, b)


def lock_rows(conn: Tx, stmt: Select[Any]) -> Select[Any]:
    """``stmt`` locking the rows it reads until the transaction ends (``FOR UPDATE``; SQLite's
    transaction holds the whole file already)."""
    return stmt if is_sqlite(conn) else stmt.with_for_update()


def skip_locked(conn: Tx, stmt: Select[Any]) -> Select[Any]:
    """``stmt`` taking only rows no other transaction holds (``FOR UPDATE SKIP LOCKED``), so
    processes sweeping at once split the rows (SQLite: one writer at a time anyway)."""
    return stmt if is_sqlite(conn) else stmt.with_for_update(skip_locked=True)


async def lock_conversation(conn: Tx, table: Table, conversation_id: str) -> bool:
    """Hold the conversation's row until the transaction ends (numbering its turns and files);
    whether it exists."""
    stmt = lock_rows(conn, select(table.c.id).where(table.c.id == conversation_id))
    return (await conn.execute(stmt)).first() is not None


_PREBUILT: dict[Any, tuple[str, tuple[str, ...], dict[str, Any]]] = {}


def sqlite_prebuilt(conn: Tx | Connection | Engine, stmt: Any, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """A statement built once at import (with ``bindparam`` placeholders) as SQLite SQL and its
    arguments, to run straight on the driver's cursor: building a statement, its cache key and
    its row objects costs SQLAlchemy more than SQLite takes to run it (twice the time of a
    chat-log load). ``conn``: anything with the SQLite ``dialect``. Compiled once per statement
    (never pass one built per call: each would be kept)."""
    compiled = _PREBUILT.get(stmt)
    if compiled is None:
        c = stmt.compile(dialect=conn.dialect)
        compiled = _PREBUILT[stmt] = (c.string, tuple(c.positiontup or ()), dict(c.params))
    sql, names, defaults = compiled
    return sql, [params[n] if n in params else defaults[n] for n in names]


def prebuilt(conn: Connection, stmt: Any, params: dict[str, Any]) -> Any:
    """Run a statement built once (``bindparam`` placeholders) with ``params`` on a synchronous
    connection; its rows, fetched (``all``, ``first``, ``scalar`` as SQLAlchemy's ``Result``). On
    SQLite as SQL compiled once (:func:`sqlite_prebuilt`) on the driver's own cursor: SQLAlchemy's
    execution context and result objects cost about 30 us of CPU a statement, more than SQLite
    takes to run one of these; else as usual.

    Raises:
        sqlite3.Error, sqlalchemy.exc.DBAPIError: the driver failed.
    """
    if conn.dialect.name == "sqlite":
        sql, args = sqlite_prebuilt(conn, stmt, params)
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            return Fetched(cursor.execute(sql, args).fetchall())
        finally:
            cursor.close()
    return conn.execute(stmt, params)


async def advisory_lock(conn: Tx, key: int | str) -> None:
    """Serialise the rest of the transaction with every other one taking the same ``key`` (an int,
    or a text hashed by the server): ``pg_advisory_xact_lock``. Nothing on SQLite, whose write
    transactions are serialised by ``BEGIN IMMEDIATE``."""
    if is_sqlite(conn):
        return
    arg = func.hashtext(key) if isinstance(key, str) else key
    await conn.execute(select(func.pg_advisory_xact_lock(arg)))
