"""Storage: conversations (protocol, SQLite, PostgreSQL), the media store and sinks for generated files.

Modules: :mod:`.protocol` (the :class:`ConversationStore` interface), :mod:`.sqlite` (the default
store), :mod:`.database` (its connections), :mod:`.migrations` (its schema, as ``.sql`` files),
:mod:`.retention` (what prune/forget delete), :mod:`.quota` (the media quota at write time),
:mod:`.lease` (process owners and leases: the rules for sharing a store), :mod:`.sql` (the PostgreSQL
store and the Alembic migrations both share), :mod:`.chatlog` (the chat log within a token
budget), :mod:`.text` (condensed answers, valid UTF-8), :mod:`.media` (the media files).

May import :mod:`pipeline` (types) and the rest of :mod:`bot` below the service (settings,
errors, tokens); never the service, the command line or :mod:`adapters`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..incoming import ConversationKey
from ..settings import StorageSettings
from . import lease
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


async def open_store(
    storage: StorageSettings, media: MediaWriter, *, busy_timeout: float = 5.0, upgrade: bool | None = None,
    on_interrupted: Callable[[list[tuple[ConversationKey, int]]], Awaitable[None]] | None = None,
) -> ConversationStore:
    """Open the store for ``[storage]`` settings, ready to serve.

    Without ``database_url``: ``storage.data_dir / "conversations.sqlite3"``
    (:class:`SQLiteStore`). With it: that PostgreSQL database (:class:`PostgresStore`), media
    files still under ``data_dir`` (shared by every process). Either way the schema is migrated
    (unless ``auto_migrate`` is off and migrations are pending: then refused), this process is
    registered as an owner with a heartbeat lease of ``lease_seconds`` (:mod:`bot.store.lease`),
    the running turns of gone processes are marked interrupted (turns of live processes sharing
    the store are left alone), ``max_age_days`` and ``max_media_bytes`` are applied
    (``prune``) if set, and, when ``media`` is a :class:`MediaStore`, ``max_media_bytes`` is
    enforced on every file written through it while open (:mod:`bot.store.quota`). Call it once
    per process at start (``Service.create``); any number of processes may share one store.

    Args:
        storage: the ``[storage]`` settings.
        media: the media store rooted at the data directory (``MediaStore(data_dir)``).
        busy_timeout: SQLite: seconds to wait for a lock held by another process.
        upgrade: apply pending migrations (default: ``storage.auto_migrate``).
        on_interrupted: the store's :attr:`ConversationStore.on_interrupted`, set before the
            turns of gone processes are marked at start.

    Returns:
        The open store (close it with ``close()``).

    Raises:
        StorageError: one sentence: the SQLite file is corrupt, locked, from a newer version or
            not writable; the database URL is wrong, the server unreachable, the credentials
            refused, the database read-only or from a newer version, or migrations are pending
            with ``auto_migrate`` off. Nothing is written then.
    """
    lease.configure(storage.lease_seconds)
    upgrade = storage.auto_migrate if upgrade is None else upgrade
    store: ConversationStore
    if storage.database_url is not None:
        from .sql.postgres import PostgresStore

        store = PostgresStore(
            storage.database_url.get_secret_value(), storage.data_dir, media, max_media_bytes=storage.max_media_bytes,
            max_age_days=storage.max_age_days, upgrade=upgrade,
        )
    else:
        store = SQLiteStore(
            storage.data_dir, media, busy_timeout=busy_timeout, max_media_bytes=storage.max_media_bytes,
            max_age_days=storage.max_age_days,
        )
    store.on_interrupted = on_interrupted
    await store.open()
    try:
        await store.mark_interrupted()
        if storage.max_age_days is not None or storage.max_media_bytes is not None:
            await store.prune(max_age_days=storage.max_age_days, max_media_bytes=storage.max_media_bytes)
    except BaseException:
        await store.close()
        raise
    return store
