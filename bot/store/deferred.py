"""The media ledger of a process that keeps no conversations (``hugginggpt run``): the store is
opened only when the first media file is written (a user's ``--file`` or a generated file), so a
run that writes none never opens it, and the files of one that does are still recorded, pinned
while it runs and counted against ``[storage] max_media_bytes`` like every other file
(:mod:`bot.store.retention`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..settings import StorageSettings
from .media import MediaStore
from .protocol import ConversationStore


class DeferredLedger:
    """:class:`bot.store.media.MediaLedger` that opens the store of ``storage`` on its first use
    and then hands every call to the ledger the open store installs on ``media``.

    Args:
        storage: the ``[storage]`` settings; media: the media store it serves.
    """

    def __init__(self, storage: StorageSettings, media: MediaStore) -> None:
        self.storage, self.media = storage, media
        self.store: ConversationStore | None = None
        self._lock = asyncio.Lock()

    async def _ledger(self):  # noqa: ANN202 - the open store's ledger
        async with self._lock:
            if self.store is None:
                from . import open_store

                self.media.ledger = None
                try:
                    self.store = await open_store(self.storage, self.media)  # installs its own ledger
                finally:
                    if self.store is None:
                        self.media.ledger = self
            return self.media.ledger

    async def reserve(self, path: Path, size: int) -> bool:
        """Open the store if needed, then record the file (see ``MediaLedger.reserve``).

        Raises:
            StorageError: the store cannot be opened, or the file does not fit under the quota.
        """
        return await (await self._ledger()).reserve(path, size)

    async def release(self, path: Path) -> None:
        """See ``MediaLedger.release``."""
        await (await self._ledger()).release(path)

    async def close(self) -> None:
        """Close the store if it was opened (this process's pins are released)."""
        store, self.store = self.store, None
        if store is not None:
            await store.close()
