"""Retention and the media quota: which conversations and media files to delete
(``[storage] max_age_days``, ``max_media_bytes``, ``hugginggpt store prune|forget``).

The decisions (:func:`expired`, :func:`over_budget`, :func:`plan`) are pure functions over plain
rows, testable without a database; :func:`prune`, :func:`forget` and
:func:`media_bytes` apply them to a :class:`bot.store.database.Database`; the write-time quota
check is :mod:`bot.store.quota`.

Rules (several processes may share the data directory, see :mod:`bot.store.lease`):

* Every media file the bot writes is recorded in the ``media`` table with its size and when it was
  last written or reused, conversation files and ``hugginggpt run`` files alike; the quota counts
  every recorded file once (identical content is stored once and shared).
* Protected, never deleted automatically: a conversation with a running turn, or active within
  :data:`~bot.store.lease.RECENT_SECONDS` (10 minutes); a file referenced by a kept
  conversation, pinned by a live owner (being written, or a ``run`` file of a running
  process), or written/reused within :data:`~bot.store.lease.RECENT_SECONDS`.
* ``max_age_days``: conversations idle longer, and unreferenced files unused longer, are deleted.
* ``max_media_bytes``, checked before every file is written (:func:`bot.store.quota.reserve`)
  and by ``prune``:
  while the recorded files plus the new one exceed the quota, delete unreferenced files, least
  recently used first, then the least recently active conversations (those past
  ``max_age_days`` come first, being the oldest) with the files only they referenced. If the
  protected files alone leave no room, nothing is deleted and the write is refused with a
  :class:`StorageError`.
* ``forget`` deletes one conversation whatever its age (but refuses while a live process runs a
  turn in it), and its files unless another conversation refers to them or a live owner pins them.
* Files are unlinked only while holding the database's write lock and after their rows are gone,
  so a process storing the same content at that moment either sees no row and writes the file
  again, or records it first and the file is kept; a crash in between leaves at worst an
  unrecorded file, never a row naming a missing file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiofiles.os
import aiosqlite

from ..errors import StorageError
from . import lease
from .database import Database
from .lease import RECENT_SECONDS
from .protocol import PruneReport

log = logging.getLogger(__name__)

SECONDS_PER_DAY = 86400.0

Activity = tuple[str, float, bool]
"""``(conversation id, last activity in epoch seconds, protected: has a running turn or was
active within RECENT_SECONDS)``."""
FileRef = tuple[str, str, int]
"""``(conversation id, stored media path, size in bytes)``: one resource row."""


def expired(conversations: Sequence[Activity], *, now: float, max_age_days: float | None) -> list[str]:
    """Conversations idle for longer than ``max_age_days``.

    Args:
        conversations: every conversation, oldest activity first.
        now: the current time, epoch seconds.
        max_age_days: the limit in days (``None``: no limit).

    Returns:
        Ids of the conversations without a running turn whose last activity is before
        ``now - max_age_days`` days, in the order given.
    """
    if max_age_days is None:
        return []
    cutoff = now - max_age_days * SECONDS_PER_DAY
    return [cid for cid, updated, running in conversations if not running and updated < cutoff]


def over_budget(
    conversations: Sequence[Activity], files: Iterable[FileRef], *, gone: Iterable[str], max_media_bytes: int
) -> list[str]:
    """Conversations to delete, least recently active first, until the media they leave behind
    fit in ``max_media_bytes``.

    A file counts once however many conversations refer to it (its largest recorded size), and
    stops counting only when its last referring conversation goes.

    Args:
        conversations: every conversation, oldest activity first.
        files: every resource row.
        gone: conversations already chosen for deletion (e.g. :func:`expired`).
        max_media_bytes: the limit in bytes.

    Returns:
        Ids to delete besides ``gone``, in deletion order; may leave the media over the limit
        when only conversations with a running turn remain.
    """
    refs: dict[str, set[str]] = {}
    size_of: dict[str, int] = {}
    by_conv: dict[str, set[str]] = {}
    for cid, path, size in files:
        refs.setdefault(path, set()).add(cid)
        size_of[path] = max(size, size_of.get(path, 0))
        by_conv.setdefault(cid, set()).add(path)
    deleted = set(gone)
    for cid in deleted:
        for p in by_conv.get(cid, ()):
            refs[p].discard(cid)
    total = sum(size_of[p] for p, owners in refs.items() if owners)
    out: list[str] = []
    for cid, _, running in conversations:
        if total <= max_media_bytes:
            break
        if running or cid in deleted:
            continue
        deleted.add(cid)
        out.append(cid)
        for p in by_conv.get(cid, ()):
            refs[p].discard(cid)
            if not refs[p]:
                total -= size_of[p]
    return out


@dataclass(frozen=True)
class MediaFile:
    """A recorded media file, for :func:`plan`.

    Attributes:
        size: bytes.
        used: when it was last written or reused, epoch seconds.
        keep: pinned by a live owner or used within :data:`RECENT_SECONDS`.
    """

    size: int
    used: float
    keep: bool


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` deletes.

    Attributes:
        conversations: conversation ids to delete, in order.
        files: stored paths of the files to delete (their rows and the files on disk).
        total: bytes of the recorded files left afterwards.
        fits: whether ``total`` plus the incoming bytes is within the quota (always ``True``
            without a quota).
    """

    conversations: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    total: int = 0
    fits: bool = True


def plan(
    conversations: Sequence[Activity],
    refs: Iterable[tuple[str, str]],
    files: Mapping[str, MediaFile],
    *,
    now: float,
    max_age_days: float | None,
    max_media_bytes: int | None,
    incoming: int = 0,
) -> Plan:
    """Decide what retention deletes (the rules are in the module docstring).

    Args:
        conversations: every conversation, least recently active first.
        refs: ``(conversation id, stored path)`` of every resource row.
        files: every recorded file by stored path.
        now: the current time, epoch seconds.
        max_age_days: days (``None``: no age limit).
        max_media_bytes: the quota in bytes (``None``: no quota).
        incoming: bytes about to be written (counted against the quota).

    Returns:
        The :class:`Plan`; ``fits`` is ``False`` when even deleting every unprotected
        conversation and file leaves no room for ``incoming``.
    """
    owners: dict[str, set[str]] = {p: set() for p in files}
    by_conv: dict[str, set[str]] = {}
    for cid, path in refs:
        owners.setdefault(path, set()).add(cid)
        by_conv.setdefault(cid, set()).add(path)
    total = sum(f.size for f in files.values())
    freed: list[str] = []

    def free(path: str) -> None:
        nonlocal total
        f = files.get(path)
        if f is not None and not owners[path] and not f.keep and path not in gone_files:
            gone_files.add(path)
            freed.append(path)
            total -= f.size

    def drop(cid: str) -> None:
        doomed.append(cid)
        for p in sorted(by_conv.get(cid, ()), key=lambda p: files[p].used if p in files else 0.0):
            owners[p].discard(cid)
            free(p)

    gone_files: set[str] = set()
    doomed: list[str] = []
    for cid in expired(conversations, now=now, max_age_days=max_age_days):
        drop(cid)
    unreferenced = sorted((f.used, p) for p, f in files.items() if not owners[p])
    if max_age_days is not None:
        cutoff = now - max_age_days * SECONDS_PER_DAY
        for used, p in unreferenced:
            if used < cutoff:
                free(p)
    if max_media_bytes is None:
        return Plan(doomed, freed, total, True)
    limit = max_media_bytes - incoming
    for _, p in unreferenced:
        if total <= limit:
            break
        free(p)
    for cid, _, protected in conversations:
        if total <= limit:
            break
        if not protected and cid not in doomed:
            drop(cid)
    return Plan(doomed, freed, total, total <= limit)


async def media_bytes(db: Database) -> int:
    """Bytes of the recorded media files (each counted once; the quota's measure).

    Raises:
        StorageError: the database is unusable.
    """
    rows = await db.read("measuring media", "SELECT coalesce(sum(size), 0) FROM media")
    return int(rows[0][0])


async def snapshot(
    conn: aiosqlite.Connection, *, now: float, me: str | None
) -> tuple[list[Activity], list[tuple[str, str]], dict[str, MediaFile]]:
    """The inputs of :func:`plan`, read inside the caller's write transaction ``conn`` (after
    removing gone owners, so a pin of a gone owner no longer counts).

    Returns:
        ``(conversations, refs, files)`` as :func:`plan` takes them; a conversation is protected
        when it has a running turn or was active within :data:`RECENT_SECONDS` of ``now``.
    """
    await lease.sweep(conn, now=now, me=me)
    recent = now - RECENT_SECONDS
    rows = await conn.execute_fetchall(
        "SELECT id, updated, EXISTS(SELECT 1 FROM turns t WHERE t.conversation_id = c.id"
        " AND t.status='running') FROM conversations c ORDER BY updated, created"
    )
    conversations = [(cid, updated, bool(running) or updated >= recent) for cid, updated, running in rows]
    files = {
        path: MediaFile(size, used, bool(pinned) or used >= recent)
        for path, size, used, pinned in await conn.execute_fetchall(
            "SELECT path, size, used, owner IS NOT NULL AND owner IN (SELECT id FROM owners) FROM media"
        )
    }
    refs = []
    for cid, path, size in await conn.execute_fetchall("SELECT conversation_id, path, size FROM resources"):
        refs.append((cid, path))
        if path not in files:  # written by a version without the media table: count it
            files[path] = MediaFile(size, 0.0, False)
    return conversations, refs, files


async def delete_rows(conn: aiosqlite.Connection, p: Plan) -> None:
    """Delete the plan's conversations (turns and resource rows cascade) and file rows, inside the
    caller's write transaction; the files themselves go with :func:`unlink_unrecorded` after it."""
    if p.conversations:
        marks = ",".join("?" * len(p.conversations))
        await conn.execute(f"DELETE FROM conversations WHERE id IN ({marks})", p.conversations)
    await conn.executemany("DELETE FROM media WHERE path=?", [(f,) for f in p.files])


async def unlink_unrecorded(db: Database, paths: Sequence[str], resolve: Callable[[str], Path]) -> tuple[int, int]:
    """Delete the files of ``paths`` that no row records or references any more, inside a write
    transaction (the caller holds ``db.lock``); a file that cannot be deleted is logged and kept.

    Returns:
        ``(files deleted, bytes freed)`` (sizes measured on disk).

    Raises:
        StorageError: the database is unusable (nothing is deleted).
    """
    files = freed = 0
    if not paths:
        return 0, 0
    async with db.tx("deleting media files") as conn:
        for path in paths:
            row = await (
                await conn.execute(
                    "SELECT 1 FROM media WHERE path=? UNION ALL SELECT 1 FROM resources WHERE path=? LIMIT 1",
                    (path, path),
                )
            ).fetchone()
            if row is not None:  # stored again meanwhile
                continue
            target = resolve(path)
            try:
                size = (await aiofiles.os.stat(target)).st_size
                await aiofiles.os.unlink(target)
                files += 1
                freed += size
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("could not delete media file %s: %s", target, e)
    return files, freed


async def forget(db: Database, conversation_id: str, resolve: Callable[[str], Path], *, now: float, me: str | None) -> bool:
    """Delete one conversation whatever its age, and its files unless another conversation refers
    to them or a live owner pins them. Running turns of gone owners are marked interrupted first.

    Returns:
        ``True`` if the conversation existed.

    Raises:
        StorageError: the conversation has a turn running in a live process (nothing is deleted),
            or the database is unusable.
    """
    async with db.lock:
        async with db.tx("forgetting a conversation") as conn:
            if await (await conn.execute("SELECT 1 FROM conversations WHERE id=?", (conversation_id,))).fetchone() is None:
                return False
            await lease.mark_orphans(conn, now=now, me=me)
            running = "SELECT 1 FROM turns WHERE conversation_id=? AND status='running'"
            if await (await conn.execute(running, (conversation_id,))).fetchone() is not None:
                raise StorageError(
                    f"Conversation {conversation_id} has a turn running in a live process; try again when it has"
                    " finished.", f"forget refused: running turn in {conversation_id} ({db.path})",
                )
            paths = [r[0] for r in await conn.execute_fetchall(
                "SELECT DISTINCT path FROM resources WHERE conversation_id=?", (conversation_id,)
            )]
            await conn.execute("DELETE FROM conversations WHERE id=?", (conversation_id,))
            doomed = []
            for path in paths:
                row = await (
                    await conn.execute(
                        "SELECT 1 FROM resources WHERE path=? UNION ALL SELECT 1 FROM media WHERE path=?"
                        " AND owner IN (SELECT id FROM owners) LIMIT 1",
                        (path, path),
                    )
                ).fetchone()
                if row is None:
                    doomed.append(path)
            await conn.executemany("DELETE FROM media WHERE path=?", [(p,) for p in doomed])
        await unlink_unrecorded(db, doomed, resolve)
    return True


async def prune(
    db: Database,
    *,
    now: float,
    max_age_days: float | None,
    max_media_bytes: int | None,
    resolve: Callable[[str], Path],
    me: str | None = None,
) -> PruneReport:
    """Apply ``max_age_days`` and ``max_media_bytes`` (:func:`plan`); ``None`` disables a limit.

    Args:
        db: the open database.
        now: the current time, epoch seconds.
        max_age_days: ``[storage] max_age_days``.
        max_media_bytes: ``[storage] max_media_bytes``.
        resolve: stored path -> absolute path.
        me: this process's owner id (its pins count as live).

    Returns:
        What was removed, and the recorded media bytes left.

    Raises:
        StorageError: the database is unusable.
    """
    async with db.lock:
        async with db.tx("pruning") as conn:
            p = plan(*await snapshot(conn, now=now, me=me), now=now, max_age_days=max_age_days,
                     max_media_bytes=max_media_bytes)
            await delete_rows(conn, p)
        nfiles, freed = await unlink_unrecorded(db, p.files, resolve)
    report = PruneReport(len(p.conversations), nfiles, freed, await media_bytes(db))
    if p.conversations or p.files:
        log.info("pruned %s: %s", db.path, report)
    return report
