"""Schema migrations with Alembic, for SQLite and PostgreSQL alike: the only source of the schema.

The revisions live in ``bot/store/sql/alembic/versions`` (one file each; released files are never
edited). ``0001``-``0004`` and ``0005`` are the schema versions 1 to 5 that earlier releases wrote
as numbered ``.sql`` files with ``PRAGMA user_version``: on SQLite each one applies its version's
statements when the file's ``user_version`` is below it (so a file at any of those versions, which
has no ``alembic_version`` table, is brought forward from where it is), and it does nothing on
PostgreSQL, where ``0005`` creates version 5 whole. Every later revision runs on both databases.
There is no ``alembic.ini``: :func:`upgrade` drives Alembic's migration context directly on a
connection the store opened (operators use ``hugginggpt db upgrade``, not ``alembic``).

This module is imported only when a database is not at :data:`HEAD` (the store checks that with one
query, :mod:`bot.store.sql.database`), which keeps Alembic out of an ordinary start.

Concurrency: the whole upgrade is one transaction, serialised between processes (PostgreSQL: an
advisory transaction lock; SQLite: ``BEGIN IMMEDIATE``), and the current revision is read after
the lock is taken, so two processes starting at once never migrate twice.
"""

from __future__ import annotations

from pathlib import Path

from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection

from .dialect import MIGRATION_LOCK
from .revisions import SQLITE_STATE, Refused, check_sqlite
from .schema import metadata

SCRIPTS = ScriptDirectory(str(Path(__file__).with_name("alembic")))
"""The shipped revisions."""
HEAD: str = SCRIPTS.get_current_head() or ""
"""The revision this bot writes (also :data:`bot.store.sql.revisions.HEAD`, without Alembic)."""


def _check_sqlite(conn: Connection) -> None:
    """Refuse another program's SQLite file or a newer legacy one (:func:`~.revisions.check_sqlite`)."""
    version, tables, versioned = conn.exec_driver_sql(SQLITE_STATE).one()
    check_sqlite(int(version), int(tables), bool(versioned))


def pending(conn: Connection) -> list[str]:
    """The revisions :func:`upgrade` would apply, oldest first (``[]`` when at :data:`HEAD`).

    Raises:
        Refused: the database is at a revision this bot does not know.
        sqlalchemy.exc.DBAPIError: the database failed (the caller maps it).
    """
    rev = MigrationContext.configure(conn).get_current_revision()
    if rev is not None:
        try:
            SCRIPTS.get_revision(rev)
        except CommandError:
            raise Refused("newer", f"revision {rev}") from None
    if rev == HEAD:
        return []
    return [s.revision for s in reversed(list(SCRIPTS.iterate_revisions(HEAD, rev or "base")))]


def upgrade(conn: Connection, *, apply: bool = True) -> list[str]:
    """Apply the pending revisions inside the caller's transaction on ``conn`` (a sync
    connection: ``await async_conn.run_sync(upgrade)``), after taking the migration lock.

    Args:
        conn: the connection, in a write transaction (SQLite: ``BEGIN IMMEDIATE``).
        apply: ``False``: refuse instead of applying (``[storage] auto_migrate = false``).

    Returns:
        The revisions applied, oldest first.

    Raises:
        Refused: another program's file, a newer database, or revisions pending with ``apply``
            off; nothing is written.
        sqlalchemy.exc.DBAPIError: a statement failed (the caller's transaction rolls back).
    """
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
    else:
        _check_sqlite(conn)
    todo = pending(conn)
    if todo and not apply:
        raise Refused("pending", ", ".join(todo))
    if not todo:
        return []

    def revisions(rev, context):  # noqa: ANN001 - Alembic's callback signature
        return SCRIPTS._upgrade_revs(HEAD, rev)

    ctx = MigrationContext.configure(conn, opts={"fn": revisions, "target_metadata": metadata})
    with Operations.context(ctx):
        ctx.run_migrations()
    return todo
