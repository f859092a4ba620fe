"""Schema migrations with Alembic, for PostgreSQL and SQLite alike.

The revisions live in ``bot/store/sql/alembic/versions`` (one file each; released files are never
edited). Revision ``0005`` is the baseline: schema version 5, the last one written as numbered
``.sql`` files (``bot/store/migrations``, which still bring an older SQLite file up to version 5
first); every later change is an Alembic revision that runs on both databases. There is no
``alembic.ini``: :func:`upgrade` drives Alembic's migration context directly on a connection the
store opened (``alembic`` commands are not needed by operators; ``hugginggpt db upgrade`` is).

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

from .schema import metadata

SCRIPTS = ScriptDirectory(str(Path(__file__).with_name("alembic")))
"""The shipped revisions."""
HEAD: str = SCRIPTS.get_current_head() or ""
"""The revision this bot writes (also :data:`bot.store.sql.revisions.HEAD`, without Alembic)."""
MIGRATION_LOCK = 0x48474754  # "HGGT": the advisory lock id taken while migrating (PostgreSQL)


class NewerSchema(Exception):
    """The database is at a revision this bot does not know (written by a newer version)."""


def current(conn: Connection) -> str | None:
    """The database's revision (``None``: never migrated by Alembic).

    Raises:
        NewerSchema: the revision is not one of :data:`SCRIPTS`.
        sqlalchemy.exc.DBAPIError: the database failed (the caller maps it).
    """
    rev = MigrationContext.configure(conn).get_current_revision()
    if rev is not None:
        try:
            SCRIPTS.get_revision(rev)
        except CommandError:
            raise NewerSchema(rev) from None
    return rev


def pending(conn: Connection) -> list[str]:
    """The revisions :func:`upgrade` would apply, oldest first (``[]`` when at :data:`HEAD`).

    Raises:
        NewerSchema, sqlalchemy.exc.DBAPIError: as :func:`current`.
    """
    rev = current(conn)
    if rev == HEAD:
        return []
    return [s.revision for s in reversed(list(SCRIPTS.iterate_revisions(HEAD, rev or "base")))]


def upgrade(conn: Connection) -> list[str]:
    """Apply the pending revisions inside the caller's transaction on ``conn`` (a sync
    connection: ``await async_conn.run_sync(upgrade)``), after taking the migration lock.

    Returns:
        The revisions applied, oldest first.

    Raises:
        NewerSchema: the database is at an unknown (newer) revision; nothing is written.
        sqlalchemy.exc.DBAPIError: a statement failed (the caller's transaction rolls back).
    """
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
    todo = pending(conn)
    if not todo:
        return []

    def revisions(rev, context):  # noqa: ANN001 - Alembic's callback signature
        return SCRIPTS._upgrade_revs(HEAD, rev)

    ctx = MigrationContext.configure(conn, opts={"fn": revisions, "target_metadata": metadata})
    with Operations.context(ctx):
        ctx.run_migrations()
    return todo


async def upgrade_sqlite(path: Path, busy_timeout: float) -> list[str]:
    """Apply the pending revisions to the SQLite file ``path`` (already at schema version 5 by
    :mod:`bot.store.migrations`) in one ``BEGIN IMMEDIATE`` transaction, as SQLAlchemy's
    documentation advises for transactional DDL on pysqlite/aiosqlite ("Serializable isolation /
    Savepoints / Transactional DDL").

    Returns:
        The revisions applied, oldest first.

    Raises:
        NewerSchema: the file is at a revision this bot does not know.
        sqlalchemy.exc.DBAPIError: SQLite failed (locked beyond ``busy_timeout``, read-only...).
    """
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{path}", connect_args={"timeout": busy_timeout})

    @event.listens_for(engine.sync_engine, "connect")
    def _autocommit(dbapi_connection, _record):  # noqa: ANN001 - SQLAlchemy's event signature
        dbapi_connection.isolation_level = None

    @event.listens_for(engine.sync_engine, "begin")
    def _begin_immediate(conn):  # noqa: ANN001
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        async with engine.begin() as conn:
            return await conn.run_sync(upgrade)
    finally:
        await engine.dispose()


def sqlite_script() -> str:
    """The SQL Alembic runs on a SQLite file at the baseline (0005) to bring it to :data:`HEAD`
    (Alembic's offline mode), preceded by the creation of its version table.

    ``bot/store/sql/sqlite_head.sql`` is this text: a new SQLite file is created from it without
    importing Alembic (tests/test_store_scale.py checks that the file is this function's output and
    that both ways give the same schema). Regenerate it after adding a revision:
    ``python -c "from bot.store.sql.migrate import sqlite_script; print(sqlite_script(), end='')"
    > bot/store/sql/sqlite_head.sql``.
    """
    import io

    buf = io.StringIO()

    def revisions(rev, context):  # noqa: ANN001 - Alembic's callback signature
        return SCRIPTS._upgrade_revs(HEAD, "0005")

    buf.write("-- Generated by bot.store.sql.migrate.sqlite_script(): never edit by hand.\n"
              "CREATE TABLE alembic_version (\n    version_num VARCHAR(32) NOT NULL,\n"
              "    CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n);\n\n"
              "INSERT INTO alembic_version (version_num) VALUES ('0005');\n\n")
    ctx = MigrationContext.configure(dialect_name="sqlite", opts={"as_sql": True, "output_buffer": buf, "fn": revisions,
                                                                 "starting_rev": "0005"})
    with Operations.context(ctx):
        ctx.run_migrations()
    return buf.getvalue()
