"""The statements behind :meth:`bot.store.sql.store.SQLStore.files_of` (the HTTP API's
``GET /v1/files``): keyset pagination over ``(created, conversation_id, n)``, the same on SQLite and
PostgreSQL (both compare row values), so a page never skips or repeats a file when files are added
meanwhile and costs the same on the thousandth page as on the first.
"""

from __future__ import annotations

from sqlalchemy import Select, select, tuple_

from ...stored import Order, Origin
from .schema import conversations as C, resources as R

RESOURCE_COLUMNS = (R.c.id, R.c.kind, R.c.path, R.c.mime, R.c.size, R.c.origin, R.c.description, R.c.turn, R.c.name)
"""The columns a :class:`pipeline.types.Resource` is read from, in its field order."""


def position_of(conversation_id: str, resource_id: str) -> Select:
    """The keyset position ``(created, conversation_id, n)`` of one file (no row: unknown file)."""
    return select(R.c.created, R.c.conversation_id, R.c.n).where(R.c.conversation_id == conversation_id,
                                                                  R.c.id == resource_id)


def files_query(platform: str, workspace: str, *, limit: int, order: Order, origin: Origin | None,
                only: tuple[str, str] | None, after: tuple | None) -> Select:
    """The page of files of ``platform`` + ``workspace``'s conversations; each row is
    ``(conversation_id, *RESOURCE_COLUMNS, created)``.

    Args:
        limit, order, origin, only: as :meth:`bot.store.protocol.Conversations.files_of`.
        after: the position (:func:`position_of`'s row) of the previous page's last file, or ``None``.
    """
    q = (select(R.c.conversation_id, *RESOURCE_COLUMNS, R.c.created).join(C, C.c.id == R.c.conversation_id)
         .where(C.c.platform == platform, C.c.workspace == workspace))
    if origin is not None:
        q = q.where(R.c.origin == "user") if origin == "user" else q.where(R.c.origin != "user")
    if only is not None:
        q = q.where(R.c.conversation_id == only[0], R.c.id == only[1])
    cols = (R.c.created, R.c.conversation_id, R.c.n)
    if after is not None:
        key, mark = tuple_(*cols), tuple_(*after)
        q = q.where(key < mark if order == "desc" else key > mark)
    return q.order_by(*(c.desc() if order == "desc" else c.asc() for c in cols)).limit(limit)
