"""A turn's two write transactions (:meth:`SQLStore.begin_turn`, :meth:`SQLStore.finish_turn`),
the store's hottest writes (two per user request), as synchronous functions of a connection run
by :meth:`bot.store.sql.database.Database.run` (on SQLite: the whole transaction in one hop to the
writer thread), with statements built once with ``bindparam`` placeholders (on SQLite run as SQL
compiled once, :func:`bot.store.sql.dialect.prebuilt`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, func, select, update

from ...tokens import count_tokens
from .dialect import insert, prebuilt
from .schema import conversations as C, deliveries as D, turn_records as TR, turns as T

_TOUCH = update(C).where(C.c.id == bindparam("p_cid")).values(updated=bindparam("p_now"))
_TOUCH_RETURNING = _TOUCH.returning(C.c.id)
_NEXT_INDEX = select(func.coalesce(func.max(T.c.idx) + 1, 0)).where(T.c.conversation_id == bindparam("p_cid"))
_INSERT = T.insert().values(
    conversation_id=bindparam("p_cid"), idx=bindparam("p_idx"), user_text=bindparam("p_text"), status="running",
    created=bindparam("p_now"), user=bindparam("p_user"), tokens=bindparam("p_tokens"), owner=bindparam("p_owner"))
_SETTLE = update(D).where(D.c.key == bindparam("p_delivery")).values(payload=None)
_THIS = (T.c.conversation_id == bindparam("p_cid"), T.c.idx == bindparam("p_idx"))
_USER_TEXT = select(T.c.user_text).where(*_THIS)
_FINISH = update(T).where(*_THIS).values(
    summary=bindparam("p_summary"), tokens=bindparam("p_tokens"), status=bindparam("p_status"),
    error=bindparam("p_error"), finished=bindparam("p_now"))
_RECORDS: dict[str, Any] = {}  # dialect name -> the turn record's upsert


def _record_upsert(conn: Connection) -> Any:
    """``INSERT INTO turn_records ... ON CONFLICT (conversation_id, idx) DO UPDATE`` of the
    connection's dialect, built once per dialect."""
    stmt = _RECORDS.get(conn.dialect.name)
    if stmt is None:
        ins = insert(conn, TR).values(conversation_id=bindparam("p_cid"), idx=bindparam("p_idx"),
                                      answer=bindparam("p_answer"), record=bindparam("p_record"))
        stmt = _RECORDS[conn.dialect.name] = ins.on_conflict_do_update(
            index_elements=[TR.c.conversation_id, TR.c.idx], set_={"answer": ins.excluded.answer, "record": ins.excluded.record})
    return stmt


def begin(conn: Connection, cid: str, *, text: str, user: str | None, tokens: int, now: float, owner: str,
          delivery: str | None) -> int | None:
    """Add a running turn to conversation ``cid`` (and settle ``delivery``, answered by it); the
    index is taken holding the conversation's row (the ``UPDATE`` comes first).

    Returns:
        The turn's index (0 for the first), or ``None`` when the conversation does not exist.
    """
    if prebuilt(conn, _TOUCH_RETURNING, {"p_cid": cid, "p_now": now}).first() is None:
        return None
    idx = int(prebuilt(conn, _NEXT_INDEX, {"p_cid": cid}).scalar())
    prebuilt(conn, _INSERT, {"p_cid": cid, "p_idx": idx, "p_text": text, "p_now": now, "p_user": user,
                             "p_tokens": tokens, "p_owner": owner})
    if delivery is not None:
        prebuilt(conn, _SETTLE, {"p_delivery": delivery})
    return idx


def finish(conn: Connection, cid: str, idx: int, *, status: str, summary: str, error: str | None,
           answer: str | None, record: str, now: float) -> bool:
    """Store a turn's outcome: status, condensed answer (its tokens counted with the request's),
    error sentence, the full answer and run record (``turn_records``), and mark the conversation
    as updated.

    Returns:
        Whether the turn exists (nothing is written when it does not).
    """
    row = prebuilt(conn, _USER_TEXT, {"p_cid": cid, "p_idx": idx}).first()
    if row is None:
        return False
    prebuilt(conn, _FINISH, {"p_cid": cid, "p_idx": idx, "p_summary": summary, "p_status": status, "p_error": error,
                             "p_tokens": count_tokens(row[0]) + count_tokens(summary), "p_now": now})
    prebuilt(conn, _record_upsert(conn), {"p_cid": cid, "p_idx": idx, "p_answer": answer, "p_record": record})
    prebuilt(conn, _TOUCH, {"p_cid": cid, "p_now": now})
    return True
