"""The chat log a new turn is planned with: which earlier turns fit the token budget.

HuggingGPT's task planning sees the chat history so the planner can trace resources mentioned
earlier (Shen et al., NeurIPS 2023, §3.1); the controller's context window is finite, so the
history is cut to ``[storage] context_tokens``, newest turns first; :func:`turn_views` shapes
turns for display. Pure functions over rows,
testable without a database; :meth:`bot.store.sql.store.SQLStore.context` feeds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.types import Resource, Turn

TURN_OVERHEAD_TOKENS = 8
"""Tokens charged per turn in the chat log for its framing (role labels, separators)."""

TurnRow = tuple[int, str, str, str, int]
"""``(index, user text, condensed answer, status, tokens of text + condensed answer)``."""


def select_history(
    turns: Iterable[TurnRow], resources: Sequence[tuple[Resource, int]], budget_tokens: int
) -> list[Turn]:
    """The newest finished turns whose cost fits ``budget_tokens`` together.

    A turn costs its stored token count (:func:`bot.tokens.count_tokens` of the user text and
    condensed answer), plus the stored token counts of its resources' prompt views, plus
    :data:`TURN_OVERHEAD_TOKENS`.

    Args:
        turns: finished turns (status ok/error/failed), newest first.
        resources: the conversation's resources with their token counts, oldest first.
        budget_tokens: the budget (``[storage] context_tokens``), tokens.

    Returns:
        :class:`Turn` objects newest first, each with its resources; the list stops at the first
        turn that no longer fits (so the kept turns are always the newest, contiguous).
    """
    by_turn: dict[int | None, list[Resource]] = {}
    cost_of_files: dict[int | None, int] = {}
    for r, tokens in resources:
        by_turn.setdefault(r.turn, []).append(r)
        cost_of_files[r.turn] = cost_of_files.get(r.turn, 0) + tokens
    history: list[Turn] = []
    used = 0
    for idx, user_text, summary, status, tokens in turns:
        cost = tokens + cost_of_files.get(idx, 0) + TURN_OVERHEAD_TOKENS
        if used + cost > budget_tokens:
            break
        used += cost
        history.append(Turn(idx, user_text, summary, tuple(by_turn.get(idx, ())), status))
    return history


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
