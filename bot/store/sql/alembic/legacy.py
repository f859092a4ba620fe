"""Running a schema version of the earlier numbered ``.sql`` chain as part of an Alembic revision
(revisions 0001-0005, SQLite only): the version's statements, then its Python post-step, then
``PRAGMA user_version = N``, skipped when the file's ``user_version`` is at ``N`` or later (a file
made by the earlier releases, which has no ``alembic_version`` table, continues from where it is).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from alembic import op
from sqlalchemy import Connection


def statements(sql: str) -> list[str]:
    """The script's statements in order, each complete (split where
    :func:`sqlite3.complete_statement` says a statement ends); comment-only pieces dropped."""
    out, buf = [], ""
    for piece in sql.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            code = "\n".join(line.split("--", 1)[0] for line in buf.splitlines()).strip(" \n\t;")
            if code:
                out.append(buf.strip())
            buf = ""
    return out


def sqlite_step(version: int, sql: str, post: Callable[[Connection], None] | None = None) -> None:
    """Apply schema ``version`` (``sql``, then ``post``) to the SQLite database being migrated,
    unless it is there already; nothing on PostgreSQL."""
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    if conn.exec_driver_sql("PRAGMA user_version").scalar_one() >= version:
        return
    for statement in statements(sql):
        conn.exec_driver_sql(statement)
    if post is not None:
        post(conn)
    conn.exec_driver_sql(f"PRAGMA user_version={version:d}")
