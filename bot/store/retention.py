"""Retention: which conversations and media files to delete (``[storage] max_age_days``,
``max_media_bytes``, ``hugginggpt store prune|forget``).

The decisions (:func:`expired`, :func:`over_budget`) are pure functions over plain rows, so they
are testable without a database; :func:`prune`, :func:`forget` and :func:`media_bytes` apply them
to a :class:`bot.store.database.Database`.

Rules: conversations with a running turn are never deleted; a media file is deleted only when no
remaining conversation refers to it (identical content is stored once and shared).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import aiofiles.os

from .database import Database
from .protocol import PruneReport

log = logging.getLogger(__name__)

SECONDS_PER_DAY = 86400.0

Activity = tuple[str, float, bool]
"""``(conversation id, last activity in epoch seconds, has a running turn)``."""
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


async def media_bytes(db: Database) -> int:
    """Bytes of the distinct media files referenced by any conversation (recorded sizes).

    Raises:
        StorageError: the database is unusable.
    """
    rows = await db.read(
        "measuring media", "SELECT coalesce(sum(s), 0) FROM (SELECT max(size) AS s FROM resources GROUP BY path)"
    )
    return int(rows[0][0])


async def delete_conversations(db: Database, ids: list[str], resolve: Callable[[str], Path]) -> tuple[int, int]:
    """Delete conversations (their turns and resource rows cascade), then the media files no
    other resource refers to. The caller holds ``db.lock``.

    Files are deleted after the commit: a crash in between leaves only unreferenced files, never
    a row pointing at a missing file. A file that cannot be deleted is logged and skipped.

    Args:
        db: the open database.
        ids: conversation ids.
        resolve: stored path -> absolute path.

    Returns:
        ``(files deleted, bytes freed)``.

    Raises:
        StorageError: the database is unusable (nothing is deleted).
    """
    if not ids:
        return 0, 0
    async with db.tx("deleting conversations") as conn:
        marks = ",".join("?" * len(ids))
        paths = await conn.execute_fetchall(
            f"SELECT path, max(size) FROM resources WHERE conversation_id IN ({marks}) GROUP BY path", ids
        )
        await conn.execute(f"DELETE FROM conversations WHERE id IN ({marks})", ids)
        orphans = []
        for path, size in paths:
            row = await (await conn.execute("SELECT 1 FROM resources WHERE path=? LIMIT 1", (path,))).fetchone()
            if row is None:
                orphans.append((path, size))
    files = freed = 0
    for path, size in orphans:
        try:
            await aiofiles.os.unlink(resolve(path))
            files += 1
            freed += size
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("could not delete media file %s: %s", path, e)
    return files, freed


async def forget(db: Database, conversation_id: str, resolve: Callable[[str], Path]) -> bool:
    """Delete one conversation and its media files that no other conversation uses.

    Returns:
        ``True`` if the conversation existed.

    Raises:
        StorageError: the database is unusable.
    """
    async with db.lock:
        if not await db.read("forgetting a conversation", "SELECT 1 FROM conversations WHERE id=?", (conversation_id,)):
            return False
        await delete_conversations(db, [conversation_id], resolve)
    return True


async def prune(
    db: Database,
    *,
    now: float,
    max_age_days: float | None,
    max_media_bytes: int | None,
    resolve: Callable[[str], Path],
) -> PruneReport:
    """Apply the retention limits: first :func:`expired`, then :func:`over_budget` while the
    referenced media exceed ``max_media_bytes``. ``None`` disables a limit.

    Args:
        db: the open database.
        now: the current time, epoch seconds.
        max_age_days: ``[storage] max_age_days``.
        max_media_bytes: ``[storage] max_media_bytes``.
        resolve: stored path -> absolute path.

    Returns:
        What was removed, and the media bytes still referenced.

    Raises:
        StorageError: the database is unusable.
    """
    async with db.lock:
        rows = await db.read(
            "pruning",
            "SELECT id, updated, EXISTS(SELECT 1 FROM turns t WHERE t.conversation_id = c.id"
            " AND t.status='running') FROM conversations c ORDER BY updated, created",
        )
        conversations = [(cid, updated, bool(running)) for cid, updated, running in rows]
        doomed = expired(conversations, now=now, max_age_days=max_age_days)
        if max_media_bytes is not None and await media_bytes(db) > max_media_bytes:
            files = await db.read("pruning", "SELECT conversation_id, path, size FROM resources")
            doomed += over_budget(conversations, files, gone=doomed, max_media_bytes=max_media_bytes)
        nfiles, freed = await delete_conversations(db, doomed, resolve)
    report = PruneReport(len(doomed), nfiles, freed, await media_bytes(db))
    if doomed:
        log.info("pruned %s: %s", db.path, report)
    return report
