"""How stored turns are shown: every turn of a conversation with its answer, record and files, for
display or resuming (``hugginggpt chat --conversation``). Pure functions over rows, testable
without a database; :meth:`bot.store.sql.store.SQLStore.turns` feeds them. (Which earlier turns fit
the chat log's token budget is :func:`bot.tokens.select_history`.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pipeline.types import Resource

TurnRecordRow = tuple[int, str | None, str, str, str, str, str | None, float, float | None, str | None]
"""``(index, user, user text, full answer, condensed answer, status, error, started, finished,
run record JSON text or None)``."""


TURNS_SQL = (
    "SELECT t.idx, t.user, t.user_text, coalesce(r.answer, ''), t.summary, t.status, t.error, t.created, t.finished,"
    " r.record FROM turns t LEFT JOIN turn_records r ON r.conversation_id = t.conversation_id AND r.idx = t.idx"
    " WHERE t.conversation_id=? ORDER BY t.idx"
)
"""The rows :func:`turn_views` takes, for one conversation id."""


def turn_views(rows: Iterable[TurnRecordRow], resources: Iterable[Resource]) -> list[dict[str, Any]]:
    """Turns as JSON-able dicts for display or resuming (``hugginggpt chat --conversation``).

    Args:
        rows: the turns, oldest first.
        resources: the conversation's resources, oldest first.

    Returns:
        ``[{"index", "user", "user_text", "answer" (full), "summary", "status" ("running" |
        "ok" | "error" | "failed"), "error", "started", "finished" (epoch seconds or None),
        "record" (the RunRecord JSON or None), "resources" ([prompt views with "path" and
        "mime"])}]``, in the order of ``rows``.
    """
    by_turn: dict[int | None, list[dict[str, Any]]] = {}
    for r in resources:
        by_turn.setdefault(r.turn, []).append({**r.prompt_view(), "path": str(r.path), "mime": r.mime})
    return [
        {
            "index": idx, "user": user, "user_text": text, "answer": answer, "summary": summary,
            "status": status, "error": error, "started": started, "finished": finished,
            "record": json.loads(record) if record else None, "resources": by_turn.get(idx, []),
        }
        for idx, user, text, answer, summary, status, error, started, finished, record in rows
    ]
