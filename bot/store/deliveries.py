"""Platform deliveries taken, shared by every process of a data dir, so that a redelivered event
(Slack retries with the same ``event_id``, and sends a mention as ``app_mention`` and ``message``:
api.slack.com/apis/events-api, "Retries") is answered once even when the copies reach different
processes. Each process keeps its own in-memory check (:class:`bot.limits.SeenKeys`) in front of
this one for speed."""

from __future__ import annotations

import time

from .database import Database

KEEP_SECONDS = 24 * 3600.0
"""How long a delivery key is remembered (Slack retries within minutes; Socket Mode redelivers
after a reconnect)."""


async def claim(database: Database, keys: list[str], *, now: float | None = None) -> bool:
    """Take a delivery known by ``keys`` (any of them identifies it): ``True`` when no process
    took any of them before, and then they are all recorded, atomically (one write transaction).

    Raises:
        StorageError: the database is unusable.
    """
    now = time.time() if now is None else now
    async with database.lock, database.tx("recording a delivery") as db:
        marks = ",".join("?" * len(keys))
        seen = await (await db.execute(f"SELECT 1 FROM deliveries WHERE key IN ({marks}) LIMIT 1", keys)).fetchone()
        if seen:
            return False
        await db.executemany("INSERT INTO deliveries(key, at) VALUES (?, ?)", [(k, now) for k in keys])
        await db.execute("DELETE FROM deliveries WHERE at < ?", (now - KEEP_SECONDS,))
    return True
