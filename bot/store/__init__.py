"""Storage: the conversation store (one implementation on SQLAlchemy Core for SQLite and
PostgreSQL), the media store and sinks for generated files.

Modules: :mod:`.protocol` (the interfaces, split by caller: conversations, deliveries, shared
limits, upkeep), :mod:`.sql` (the store, its schema and Alembic migrations, where the databases
differ), :mod:`.handover` (the channel by which interrupted turns and deliveries taken over reach
the front ends), :mod:`.lease` (process owners and leases: the rules for sharing a store),
:mod:`.retention` (what prune/forget and the media quota delete), :mod:`.chatlog` (stored turns
as shown and resumed), :mod:`.text` (condensed answers, valid UTF-8), :mod:`.media` (the media files).

May import :mod:`pipeline` (types) and the rest of :mod:`bot` below the service (settings,
errors, tokens); never the service, the command line or :mod:`adapters`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..settings import StorageSettings
from . import lease
from .handover import Handover
from .media import LocalResourceSink, MediaStore
from .protocol import ConversationStore, Conversations, Deliveries, MediaWriter, PruneReport, SharedLimits, Upkeep

if TYPE_CHECKING:
    from .sql.store import SQLStore

__all__ = [
    "ConversationStore",
    "Conversations",
    "Deliveries",
    "Handover",
    "LocalResourceSink",
    "MediaStore",
    "MediaWriter",
    "PruneReport",
    "SharedLimits",
    "Upkeep",
    "make_store",
    "open_store",
]


def make_store(storage: StorageSettings, media: MediaWriter, *, busy_timeout: float = 5.0, upgrade: bool | None = None,
               events: Handover | None = None, **kw: object) -> SQLStore:
    """The store for ``[storage]`` settings, not opened yet: the SQLite file
    ``data_dir / "conversations.sqlite3"``, or with ``database_url`` that PostgreSQL database (media
    files still under ``data_dir``, shared by every process). ``kw``: more arguments of
    :class:`~bot.store.sql.store.SQLStore` (``clock``).

    Raises:
        StorageError: ``database_url`` is not a PostgreSQL URL.
    """
    from .sql.experts import database_of
    from .sql.store import SQLStore

    database = database_of(storage, busy_timeout=busy_timeout)
    upgrade = storage.auto_migrate if upgrade is None else upgrade
    return SQLStore(database, storage.data_dir, media, events=events, max_media_bytes=storage.max_media_bytes,
                    max_age_days=storage.max_age_days, upgrade=upgrade, **kw)  # type: ignore[arg-type]


async def open_store(
    storage: StorageSettings, media: MediaWriter, *, busy_timeout: float = 5.0, upgrade: bool | None = None,
    events: Handover | None = None,
) -> ConversationStore:
    """Open the store for ``[storage]`` settings (:func:`make_store`), ready to serve.

    The schema is migrated (unless ``auto_migrate`` is off and migrations are pending: then
    refused), this process is registered as an owner with a heartbeat lease of ``lease_seconds``
    (:mod:`bot.store.lease`), the running turns of gone processes are marked interrupted (turns of
    live processes sharing the store are left alone) and published on ``events``,
    ``max_age_days`` and ``max_media_bytes`` are applied (``prune``) if set, and, when ``media``
    is a :class:`MediaStore`, ``max_media_bytes`` is enforced on every file written through it
    while open. Call it once per process at start (``Service.create``); any number of processes
    may share one store.

    Args:
        storage: the ``[storage]`` settings.
        media: the media store rooted at the data directory (``MediaStore(data_dir)``).
        busy_timeout: SQLite: seconds to wait for a lock held by another process.
        upgrade: apply pending migrations (default: ``storage.auto_migrate``).
        events: the channel interrupted turns and deliveries taken over are published on (the
            service's); default: one nobody listens to.

    Returns:
        The open store (close it with ``close()``).

    Raises:
        StorageError: one sentence: the SQLite file is corrupt, locked, from a newer version or
            not writable; the database URL is wrong, the server unreachable, the credentials
            refused, the database read-only or from a newer version, or migrations are pending
            with ``auto_migrate`` off. Nothing is written then.
    """
    lease.configure(storage.lease_seconds)
    store = make_store(storage, media, busy_timeout=busy_timeout, upgrade=upgrade, events=events)
    await store.open()
    try:
        await store.mark_interrupted()
        if storage.max_age_days is not None or storage.max_media_bytes is not None:
            await store.prune(max_age_days=storage.max_age_days, max_media_bytes=storage.max_media_bytes)
    except BaseException:
        await store.close()
        raise
    return store
