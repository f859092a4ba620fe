"""Listing the files of every conversation of one owner (the HTTP API's ``GET /v1/files``).

Both stores answer :meth:`bot.store.protocol.ConversationStore.files_of` with keyset pagination
over ``(created, conversation_id, n)``: a page never skips or repeats a file when files are added
meanwhile, and costs the same on the thousandth page as on the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipeline.types import Resource

Order = Literal["asc", "desc"]
Origin = Literal["user", "task"]


@dataclass(frozen=True)
class StoredFile:
    """A resource with where and when it was stored.

    Attributes:
        conversation_id: the conversation that holds it.
        resource: the file (id, kind, absolute path, sniffed MIME type, size in bytes, origin...).
        created: when it was stored, in seconds since the epoch.
    """

    conversation_id: str
    resource: Resource
    created: float


def sqlite_files_query(platform: str, workspace: str, *, limit: int, order: Order,
                       after: tuple[str, str] | None, origin: Origin | None,
                       only: tuple[str, str] | None = None) -> tuple[str, list[Any]]:
    """The SQLite statement and arguments of :meth:`ConversationStore.files_of`; each row is
    ``(conversation_id, id, kind, path, mime, size, origin, description, turn, name, created)``."""
    cmp, direction = ("<", "DESC") if order == "desc" else (">", "ASC")
    sql = ("SELECT r.conversation_id, r.id, r.kind, r.path, r.mime, r.size, r.origin, r.description, r.turn, r.name,"
           " r.created FROM resources r JOIN conversations c ON c.id = r.conversation_id"
           " WHERE c.platform=? AND c.workspace=?")
    args: list[Any] = [platform, workspace]
    if origin == "user":
        sql += " AND r.origin='user'"
    elif origin == "task":
        sql += " AND r.origin<>'user'"
    if only is not None:
        sql += " AND r.conversation_id=? AND r.id=?"
        args += list(only)
    if after is not None:
        sql += (f" AND (r.created, r.conversation_id, r.n) {cmp} (SELECT a.created, a.conversation_id, a.n"
                " FROM resources a WHERE a.conversation_id=? AND a.id=?)")
        args += list(after)
    sql += f" ORDER BY r.created {direction}, r.conversation_id {direction}, r.n {direction} LIMIT ?"
    return sql, [*args, limit]
