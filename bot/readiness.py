"""Whether the storage a front end depends on can take work: free space, the database's health.

Used through :meth:`bot.service.Service.storage_problems` by ``/readyz`` of the HTTP API (every
check) and of Slack's HTTP mode (whether the store answers only: the chat bots keep answering
without memory when storage runs short, :mod:`bot.degraded`). Each problem is one sentence that
names no path (a readiness probe answers anyone who can reach it); the operator's log line has the
details.

* Free space: the data directory's file system needs ``[server] ready_min_free_bytes`` free
  (``shutil.disk_usage``); below it, uploads and generated files would fail.
* The conversation store answers a lookup (a SQLite read, or a PostgreSQL round trip on its
  connection pool).
* SQLite only: ``PRAGMA quick_check`` on a separate read-only connection (the SQLite manual,
  "quick_check": the integrity check without index cross-checks), at most once per
  :data:`INTEGRITY_EVERY` seconds, so a file corrupted under the running server shows before the
  next start does.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import StorageError
from .store.sql.probes import DB_NAME, quick_check

if TYPE_CHECKING:
    from .settings import Settings
    from .store import Conversations

log = logging.getLogger("bot.readiness")

INTEGRITY_EVERY = 60.0
"""Seconds between two integrity probes of the SQLite file (the result is kept meanwhile)."""
PROBE_TIMEOUT = 5.0
"""Seconds a probe may take before it counts as a problem."""
MiB = 1024 * 1024


def storage_sentence(error: BaseException) -> str:
    """One sentence for a client about a storage failure, naming no path (the store's own
    sentence names its file): full, busy, corrupt, or unavailable."""
    said = f"{getattr(error, 'user_message', '')} {error}".lower()
    text = " ".join(word for word in said.split() if "/" not in word and "\\" not in word)  # not a path's words
    if "full" in text or "no space" in text:
        return "The server's storage is full; try again later (the operator has been told)."
    if "locked" in text or "busy" in text:
        return "The server's conversation store is busy; try again in a few seconds."
    if "corrupt" in text or "malformed" in text or "not a database" in text:
        return "The server's conversation store is damaged; the operator has to repair it."
    return "The server's conversation store is unavailable; try again later."


class Readiness:
    """The storage checks of one process.

    Args:
        settings: all settings (``[storage]`` for where, ``[server] ready_min_free_bytes``).
        store: the open conversation store, or ``None`` (a service that keeps no conversations:
            nothing to look up).
    """

    def __init__(self, settings: Settings, store: Conversations | None) -> None:
        self.data_dir = Path(settings.storage.data_dir).expanduser()
        self.min_free = settings.server.ready_min_free_bytes
        self.sqlite = None if settings.storage.database_url is not None else self.data_dir / DB_NAME
        self.store = store
        self._checked = 0.0
        self._integrity: str | None = None

    async def problems(self, *, store_only: bool = False) -> list[str]:
        """What keeps the storage from taking work, one path-free sentence each (empty: ready);
        ``store_only``: only whether the store answers a lookup."""
        if store_only:
            return [p for p in (await self._lookup(),) if p]
        return [p for p in (self._space(), await self._lookup(), await self._integrity_problem()) if p]

    def _space(self) -> str | None:
        try:
            free = shutil.disk_usage(self.data_dir).free
        except OSError as e:
            log.warning("readiness: cannot measure free space of the data directory: %s", e)
            return "The data directory cannot be read."
        if free < self.min_free:
            log.warning("readiness: %d bytes free in %s, below %d", free, self.data_dir, self.min_free)
            return f"The data directory's disk has {free / MiB:.0f} MiB free, below {self.min_free / MiB:.0f} MiB."
        return None

    async def _lookup(self) -> str | None:
        if self.store is None:
            return None
        try:
            await asyncio.wait_for(self.store.find("readyz-probe"), PROBE_TIMEOUT)
        except StorageError as e:
            log.warning("readiness: the conversation store failed a lookup: %s", e)
            return storage_sentence(e)
        except TimeoutError:
            return f"The conversation store did not answer within {PROBE_TIMEOUT:.0f} s."
        return None

    async def _integrity_problem(self) -> str | None:
        if self.sqlite is None or time.monotonic() - self._checked < INTEGRITY_EVERY and self._checked:
            return self._integrity
        self._checked = time.monotonic()
        try:
            verdict = await asyncio.wait_for(asyncio.to_thread(quick_check, self.sqlite), PROBE_TIMEOUT * 6)
        except TimeoutError:
            verdict = "timed out"
        self._integrity = None if verdict == "ok" else "The conversation database failed its integrity check."
        if self._integrity:
            log.error("readiness: %s failed PRAGMA quick_check: %s", self.sqlite, verdict)
        return self._integrity
