"""The SQLite store's operations for the front ends' extras: starting a key's conversation over (a
DM's "new"), feedback on answers, claiming platform deliveries across processes, the order of a
thread's turns across processes, shared rate and concurrency limits, and telling threads about
interrupted turns. A mixin of
:class:`bot.store.sqlite.SQLiteStore` (which provides ``database`` and ``_clock``); the protocol
is :class:`bot.store.protocol.ConversationStore`."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence

from ..incoming import ConversationKey
from . import handover, lease
from .database import Database

log = logging.getLogger(__name__)

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

    async def claim_delivery(self, keys: Sequence[str], payload: str | None = None) -> bool:
        """See :meth:`ConversationStore.claim_delivery` (``deliveries`` table; keys older than
        :data:`DELIVERY_KEEP_SECONDS` are deleted as new ones arrive)."""
        now = self._clock()
        async with self.database.lock, self.database.tx("recording a delivery") as db:
            marks = ",".join("?" * len(keys))
            seen = await (await db.execute(f"SELECT 1 FROM deliveries WHERE key IN ({marks}) LIMIT 1", list(keys))).fetchone()
            if seen:
                return False
            me = self._me()  # type: ignore[attr-defined]
            await db.executemany("INSERT INTO deliveries(key, at, owner, payload) VALUES (?, ?, ?, ?)",
                                 [(k, now, me, payload if i == 0 else None) for i, k in enumerate(keys)])
            await db.execute("DELETE FROM deliveries WHERE at < ?", (now - DELIVERY_KEEP_SECONDS,))
        return True

    async def note_delivery(self, key: str, payload: str) -> None:
        """See :meth:`ConversationStore.note_delivery`."""
        async with self.database.lock, self.database.tx("noting a delivery") as db:
            await db.execute("UPDATE deliveries SET payload=? WHERE key=? AND payload IS NOT NULL", (payload, key))

    async def settle_delivery(self, key: str) -> None:
        """See :meth:`ConversationStore.settle_delivery`."""
        async with self.database.lock, self.database.tx("settling a delivery") as db:
            await db.execute("UPDATE deliveries SET payload=NULL WHERE key=? AND payload IS NOT NULL", (key,))

    on_orphaned_deliveries: Callable[[list[tuple[str, str]]], Awaitable[None]] | None = None
    adopt_prefix = ""
    """Only deliveries whose key starts with it are taken over (the front end this process runs)."""

    async def adopt_deliveries(self) -> list[tuple[str, str]]:
        """Take the unsettled deliveries of gone owners (their rows were swept) and pass them to
        :attr:`on_orphaned_deliveries`; ``[(key, payload)]``."""
        if self.on_orphaned_deliveries is None:
            return []
        async with self.database.lock, self.database.tx("taking over deliveries") as db:
            rows = await db.execute_fetchall(
                "UPDATE deliveries SET owner=? WHERE payload IS NOT NULL AND substr(key, 1, ?) = ? AND (owner IS NULL"
                " OR owner NOT IN (SELECT id FROM owners)) RETURNING key, payload",
                (self._me(), len(self.adopt_prefix), self.adopt_prefix))  # type: ignore[attr-defined]
        adopted = [(r[0], r[1]) for r in rows]
        await handover.run_adopted(str(self.database.path), self.on_orphaned_deliveries, adopted)
        return adopted

    # -- several processes: thread order, shared limits, telling threads about interrupted turns

    on_interrupted: Callable[[list[tuple[ConversationKey, int]]], Awaitable[None]] | None = None

    async def _tell(self, marked: list[tuple[str, int]]) -> None:
        """Pass turns marked interrupted to :attr:`on_interrupted` with their conversation keys."""
        await handover.tell_interrupted(self.find, self.on_interrupted, marked)  # type: ignore[attr-defined]

    async def wait_turn(self, conversation_id: str, turn: int, *, poll: float = 0.2) -> bool:
        """See :meth:`ConversationStore.wait_turn` (polls the file every ``poll`` seconds)."""
        sql = "SELECT 1 FROM turns WHERE conversation_id=? AND idx<? AND status='running' LIMIT 1"
        waited = False
        while await self.database.read("waiting for the thread's earlier turn", sql, (conversation_id, turn)):
            waited = True
            await asyncio.sleep(poll)
        return waited

    async def take_rate(self, key: str, limit: int, period: float) -> float:
        """See :meth:`ConversationStore.take_rate` (GCRA, ITU-T I.371; table ``rate_limits``)."""
        if limit <= 0:
            return 0.0
        interval = period / limit
        async with self.database.lock, self.database.tx("counting a request") as db:
            now = self._clock()
            row = await (await db.execute("SELECT tat FROM rate_limits WHERE key=?", (key,))).fetchone()
            tat = max(row[0] if row else now, now)
            wait = tat - now - (period - interval)
            if wait > 0:
                return wait
            await db.execute("INSERT INTO rate_limits(key, tat) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET tat=excluded.tat",
                             (key, tat + interval))
        return 0.0

    async def take_slot(self, key: str, limit: int) -> str | None:
        """See :meth:`ConversationStore.take_slot` (table ``run_slots``; slots of gone owners are
        removed with them)."""
        slot = secrets.token_hex(8)
        async with self.database.lock, self.database.tx("reserving a run slot") as db:
            await lease.sweep(db, now=self._clock(), me=self._me())  # type: ignore[attr-defined]
            await db.execute("DELETE FROM run_slots WHERE owner NOT IN (SELECT id FROM owners)")
            (held,) = await (await db.execute("SELECT count(*) FROM run_slots WHERE key=?", (key,))).fetchone()
            if held >= limit:
                return None
            await db.execute("INSERT INTO run_slots(id, key, owner, at) VALUES (?,?,?,?)",
                             (slot, key, self._me(), self._clock()))  # type: ignore[attr-defined]
        return slot

    async def release_slot(self, slot: str) -> None:
        """See :meth:`ConversationStore.release_slot`."""
        async with self.database.lock, self.database.tx("releasing a run slot") as db:
            await db.execute("DELETE FROM run_slots WHERE id=?", (slot,))
