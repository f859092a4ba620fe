"""The SQLite store's operations for the front ends' extras: starting a key's conversation over (a
DM's "new"), feedback on answers, and claiming platform deliveries across processes. A mixin of
:class:`bot.store.sqlite.SQLiteStore` (which provides ``database`` and ``_clock``); the protocol
is :class:`bot.store.protocol.ConversationStore`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..incoming import ConversationKey
from .database import Database

DELIVERY_KEEP_SECONDS = 24 * 3600.0
"""How long a claimed delivery key is remembered (Slack retries within minutes; Socket Mode
redelivers after a reconnect)."""


class SQLiteExtras:
    """See the module docstring."""

    database: Database
    _clock: Callable[[], float]

    async def retire(self, key: ConversationKey) -> str | None:
        """See :meth:`ConversationStore.retire` (the old conversation keeps its id and turns)."""
        async with self.database.lock, self.database.tx("starting a new conversation") as db:
            sql = "UPDATE conversations SET key=key || '#retired-' || id WHERE key=? RETURNING id"
            row = await (await db.execute(sql, (key.as_string(),))).fetchone()
        return row[0] if row else None

    async def record_feedback(self, conversation_id: str, turn: int, user: str, verdict: str) -> bool:
        """See :meth:`ConversationStore.record_feedback` (schema v4 ``feedback`` table)."""
        async with self.database.lock, self.database.tx("storing feedback") as db:
            exists = await (await db.execute("SELECT 1 FROM turns WHERE conversation_id=? AND idx=?",
                                             (conversation_id, turn))).fetchone()
            if not exists:
                return False
            await db.execute("INSERT INTO feedback(conversation_id, idx, user, verdict, at) VALUES (?,?,?,?,?)"
                             " ON CONFLICT(conversation_id, idx, user) DO UPDATE SET verdict=excluded.verdict, at=excluded.at",
                             (conversation_id, turn, user, verdict, self._clock()))
        return True

    async def claim_delivery(self, keys: Sequence[str]) -> bool:
        """See :meth:`ConversationStore.claim_delivery` (schema v5 ``deliveries`` table; keys older
        than :data:`DELIVERY_KEEP_SECONDS` are deleted as new ones arrive)."""
        now = self._clock()
        async with self.database.lock, self.database.tx("recording a delivery") as db:
            marks = ",".join("?" * len(keys))
            seen = await (await db.execute(f"SELECT 1 FROM deliveries WHERE key IN ({marks}) LIMIT 1", list(keys))).fetchone()
            if seen:
                return False
            await db.executemany("INSERT INTO deliveries(key, at) VALUES (?, ?)", [(k, now) for k in keys])
            await db.execute("DELETE FROM deliveries WHERE at < ?", (now - DELIVERY_KEEP_SECONDS,))
        return True
