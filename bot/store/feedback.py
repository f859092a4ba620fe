"""Feedback on answers (a chat platform's good/bad buttons), stored with the turn it is about."""

from __future__ import annotations

import time
from typing import Literal

from .database import Database

Verdict = Literal["good", "bad"]


async def record(database: Database, conversation_id: str, turn: int, user: str, verdict: Verdict) -> bool:
    """Store ``user``'s ``verdict`` on turn ``turn`` of ``conversation_id`` (a later click replaces
    an earlier one). Returns ``False`` when that turn does not exist (pruned or forgotten).

    Raises:
        StorageError: the database is unusable.
    """
    async with database.lock, database.tx("storing feedback") as db:
        exists = await (await db.execute("SELECT 1 FROM turns WHERE conversation_id=? AND idx=?",
                                         (conversation_id, turn))).fetchone()
        if not exists:
            return False
        await db.execute("INSERT INTO feedback(conversation_id, idx, user, verdict, at) VALUES (?,?,?,?,?)"
                         " ON CONFLICT(conversation_id, idx, user) DO UPDATE SET verdict=excluded.verdict, at=excluded.at",
                         (conversation_id, turn, user, verdict, time.time()))
    return True


async def of_turn(database: Database, conversation_id: str, turn: int) -> dict[str, Verdict]:
    """User → verdict for one turn."""
    rows = await database.read("reading feedback", "SELECT user, verdict FROM feedback WHERE conversation_id=? AND idx=?",
                               (conversation_id, turn))
    return {u: v for u, v in rows}
