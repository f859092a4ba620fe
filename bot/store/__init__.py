"""Storage: conversations (protocol, SQLite), the media store and sinks for generated files.

Modules: :mod:`.protocol` (the :class:`ConversationStore` interface), :mod:`.sqlite` (the default
store), :mod:`.database` (its connections), :mod:`.migrations` (its schema, as ``.sql`` files),
:mod:`.retention` (what prune/forget delete), :mod:`.quota` (the media quota at write time),
:mod:`.lease` (process owners and leases: the rules for sharing a data directory), :mod:`.chatlog` (the chat log within a token
budget), :mod:`.text` (condensed answers, valid UTF-8), :mod:`.media` (the media files).

May import :mod:`pipeline` (types) and the rest of :mod:`bot` below the service (settings,
errors, tokens); never the service, the command line or :mod:`adapters`.
"""

from __future__ import annotations

from ..settings import StorageSettings
from .media import LocalResourceSink, MediaStore
from .protocol import ConversationStore, MediaWriter, PruneReport
from .sqlite import SQLiteStore

__all__ = [
    "ConversationStore",
    "LocalResourceSink",
    "MediaStore",
    "MediaWriter",
    "PruneReport",
    "SQLiteStore",
    "open_store",
]


async def open_store(storage: StorageSettings, media: MediaWriter, *, busy_timeout: float = 5.0) -> SQLiteStore:
    """Open the default store for ``[storage]`` settings, ready to serve.

    Opens (creates/migrates) ``storage.data_dir / "conversations.sqlite3"`` and registers this
    process as an owner with a heartbeat lease (:mod:`bot.store.lease`); marks the running turns of
    gone processes as failed (:meth:`SQLiteStore.mark_interrupted`; turns of live processes sharing
    the directory are left alone); applies ``storage.max_age_days`` and
    ``storage.max_media_bytes`` (:meth:`SQLiteStore.prune`, which spares running and recent
    conversations and files) if set; and, when ``media`` is a :class:`MediaStore`, enforces
    ``max_media_bytes`` on every file written through it while open (:mod:`bot.store.quota`).
    Call it once per process at start (``Service.create``); several processes may do so on one
    data directory.

    Args:
        storage: the ``[storage]`` settings.
        media: the media store rooted at the same data directory (``MediaStore(data_dir)``).
        busy_timeout: seconds to wait for a lock held by another process.

    Returns:
        The open :class:`SQLiteStore` (close it with :meth:`SQLiteStore.close`).

    Raises:
        StorageError: the database is corrupt, locked, from a newer version, or not writable.
    """
    store = SQLiteStore(
        storage.data_dir, media, busy_timeout=busy_timeout, max_media_bytes=storage.max_media_bytes,
        max_age_days=storage.max_age_days,
    )
    await store.open()
    try:
        await store.mark_interrupted()
        if storage.max_age_days is not None or storage.max_media_bytes is not None:
            await store.prune(max_age_days=storage.max_age_days, max_media_bytes=storage.max_media_bytes)
    except BaseException:
        await store.close()
        raise
    return store
