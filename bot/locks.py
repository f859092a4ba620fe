"""Ordering of runs per conversation: one FIFO lock per thread."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Any, AsyncContextManager


class ThreadLocks:
    """One FIFO lock per conversation key: runs of the same thread go in order, different threads
    never wait for each other. A key's lock exists only while someone holds or waits for it, so
    memory stays bounded by the number of runs in flight.

    Example::

        locks = ThreadLocks()
        async with locks.lock(key.as_string()):
            ...  # one turn of this thread
    """

    def __init__(self) -> None:
        self._locks: dict[Hashable, list[Any]] = {}  # key -> [asyncio.Lock, holders + waiters]

    def __len__(self) -> int:
        """Number of keys with a run holding or waiting for their lock."""
        return len(self._locks)

    def lock(self, key: Hashable) -> AsyncContextManager[None]:
        """Async context manager holding the lock of ``key`` (any hashable, e.g. a key string)."""
        return self._hold(key)

    @asynccontextmanager
    async def _hold(self, key: Hashable) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._locks.pop(key, None)
