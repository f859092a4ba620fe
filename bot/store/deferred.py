"""The media ledger of a process that keeps no conversations (``hugginggpt run``): the store is
opened in the background as soon as the service is built (:meth:`DeferredLedger.start`: the
store's imports, the schema of a new data directory, this process's registration), so that a run's
first media file (a user's ``--file`` or a generated file) is recorded at once instead of waiting
for all that between two dependent tasks. The files are recorded, pinned while the run lasts and
counted against ``[storage] max_media_bytes`` like every other file (:mod:`bot.store.retention`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from pathlib import Path

from pipeline.catalog.servers import RegisteredServer

from ..settings import StorageSettings
from .media import MediaStore
from .protocol import ConversationStore
from .sql.probes import DB_NAME

log = logging.getLogger(__name__)

_STORE_MODULES = ("bot.store.sql.store", "sqlalchemy.dialects.sqlite")
"""What opening the store imports (SQLAlchemy among them): imported on a worker thread, so that the
event loop goes on reading the plan meanwhile."""
_SCHEMA_MODULES = ("bot.store.sql.migrate",)
"""What creating the schema imports (Alembic): also, when the SQLite file does not exist yet."""

_importing: dict[tuple[str, ...], asyncio.Future[None]] = {}


def _import_all(names: tuple[str, ...]) -> None:
    for name in names:
        importlib.import_module(name)


def begin_store_imports(storage: StorageSettings) -> asyncio.Future[None]:
    """Start importing what opening the store of ``storage`` needs, on a worker thread, at once
    (not at the event loop's next turn) and once per process (call it from a running event loop;
    ``hugginggpt run`` calls it before it loads the pipeline, so the two overlap). Returns the
    future (awaiting it raises the import's error).

    Args:
        storage: the ``[storage]`` settings (a new SQLite file needs Alembic as well).
    """
    names = _STORE_MODULES
    if storage.database_url is None and not (storage.data_dir / DB_NAME).exists():
        names += _SCHEMA_MODULES
    future, loop = _importing.get(names), asyncio.get_running_loop()
    if future is None or future.get_loop() is not loop:  # (a test runs several loops in one process)
        future = _importing[names] = loop.run_in_executor(None, _import_all, names)  # submitted now
    return future


class DeferredLedger:
    """:class:`bot.store.media.MediaLedger` that opens the store of ``storage`` (in the background
    once :meth:`start` is called, else on its first use) and then hands every call to the ledger
    the open store installs on ``media``. A write that comes while the store is still opening waits
    for it: no file goes unrecorded.

    Args:
        storage: the ``[storage]`` settings; media: the media store it serves.
    """

    def __init__(self, storage: StorageSettings, media: MediaStore) -> None:
        self.storage, self.media = storage, media
        self.store: ConversationStore | None = None
        self._lock = asyncio.Lock()
        self._opening: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin opening the store in the background (call it from a running event loop). A
        failure is kept for the first file written, which then tries once more and says it."""
        if self._opening is None and self.store is None:
            self._opening = asyncio.get_running_loop().create_task(self._open(), name="open the media ledger's store")

    async def _open(self) -> None:
        """Open the store (once) and install its ledger on ``media``.

        Raises:
            StorageError: the store cannot be opened (``media``'s ledger stays this one).
        """
        if self.store is not None:
            return
        await asyncio.shield(begin_store_imports(self.storage))
        from . import open_store

        try:
            self.store = await open_store(self.storage, self.media)  # installs its own ledger
        finally:
            if self.store is None:
                self.media.ledger = self

    async def _ledger(self):  # noqa: ANN202 - the open store's ledger
        async with self._lock:
            opening, self._opening = self._opening, None
            if opening is not None:
                try:
                    await asyncio.shield(opening)
                except Exception as e:  # noqa: BLE001 - tried once more just below, which says it
                    log.info("the store did not open in the background (%s); trying again", e)
            if self.store is None:
                await self._open()
            return self.media.ledger

    async def reserve(self, path: Path, size: int) -> bool:
        """Wait for the store if it is still opening (open it if needed), then record the file
        (see ``MediaLedger.reserve``).

        Raises:
            StorageError: the store cannot be opened, or the file does not fit under the quota.
        """
        return await (await self._ledger()).reserve(path, size)

    async def release(self, path: Path) -> None:
        """See ``MediaLedger.release``."""
        await (await self._ledger()).release(path)

    async def live_experts(self) -> list[RegisteredServer]:
        """The store's registered expert servers (:meth:`ExpertRegistry.live_experts`) once it
        has opened (an opening under way is awaited); ``[]`` when it did not open (the file that
        needs the store says why).

        Raises:
            StorageError: the open store could not be read.
        """
        opening = self._opening
        if opening is not None and self.store is None:
            with contextlib.suppress(Exception):
                await asyncio.shield(opening)
        return await self.store.live_experts() if self.store is not None else []

    async def close(self) -> None:
        """Close the store if it was opened (this process's pins are released); an opening still
        under way is awaited first (cut short, it could leave the store half registered)."""
        opening, self._opening = self._opening, None
        if opening is not None:
            try:
                await opening
            except Exception as e:  # noqa: BLE001 - no file needed it: nothing for the user
                log.warning("the store did not open in the background: %s", e)
        store, self.store = self.store, None
        if store is not None:
            await store.close()
