"""The media quota at write time: every media file is recorded before it is written, and room is
made under ``[storage] max_media_bytes`` first (rules: :mod:`bot.store.retention`).

:class:`Ledger` is what an open :class:`bot.store.sqlite.SQLiteStore` installs as
:attr:`bot.store.media.MediaStore.ledger`, so conversation files and ``hugginggpt run`` files are
counted alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ..errors import StorageError
from .database import Database
from .retention import Plan, delete_rows, snapshot, unlink_unrecorded, plan

log = logging.getLogger(__name__)


def _full(where: Path, size: int, quota: int, used: int) -> StorageError:
    msg = (
        f"The media storage {where} is full: a {size:,}-byte file does not fit in [storage] max_media_bytes"
        f" = {quota:,} ({used:,} bytes are in use by running or recent conversations and files);"
        " raise [storage] max_media_bytes or prune (hugginggpt store prune / forget)."
    )
    log.error("media quota: refused %d bytes in %s: %d of %d in use and protected", size, where, used, quota)
    return StorageError(msg)


async def reserve(
    db: Database,
    path: str,
    size: int,
    *,
    now: float,
    max_age_days: float | None,
    max_media_bytes: int | None,
    resolve: Callable[[str], Path],
    me: str,
    where: Path,
) -> bool:
    """Record a media file about to be written, pinned by ``me``, making room under the quota
    first (:func:`plan` with ``incoming=size``). Content already recorded is only touched
    (``used`` = now; pinned by ``me`` unless a live owner already pins it).

    Args:
        db: the open database.
        path: the file's stored path (relative to the data directory).
        size: its bytes.
        now: the current time, epoch seconds.
        max_age_days: ``[storage] max_age_days`` (orders candidates; see the module docstring).
        max_media_bytes: the quota in bytes, or ``None``.
        resolve: stored path -> absolute path.
        me: this process's owner id.
        where: the media directory, for the error sentence.

    Returns:
        ``True`` if the row is new (delete it with :func:`release` if the write fails).

    Raises:
        StorageError: the file does not fit even after deleting everything unprotected
            (nothing is deleted then), or the database is unusable.
    """
    async with db.lock:
        async with db.tx("saving a file") as conn:
            cur = await conn.execute(
                "UPDATE media SET used=?, owner=CASE WHEN owner IS NOT NULL AND owner != ? AND owner IN"
                " (SELECT id FROM owners) THEN owner ELSE ? END WHERE path=?",
                (now, me, me, path),
            )
            if cur.rowcount:
                return False
            p = Plan()
            if max_media_bytes is not None:
                (total,) = await (await conn.execute("SELECT coalesce(sum(size), 0) FROM media")).fetchone()
                if total + size > max_media_bytes:
                    p = plan(*await snapshot(conn, now=now, me=me), now=now, max_age_days=max_age_days,
                             max_media_bytes=max_media_bytes, incoming=size)
                    if not p.fits:
                        raise _full(where, size, max_media_bytes, p.total)
                    await delete_rows(conn, p)
            await conn.execute(
                "INSERT INTO media(path, size, created, used, owner) VALUES (?,?,?,?,?)", (path, size, now, now, me)
            )
        if p.files:
            nfiles, freed = await unlink_unrecorded(db, p.files, resolve)
            log.info("media quota: made room for %d bytes in %s: %d conversation(s), %d file(s), %d bytes",
                     size, where, len(p.conversations), nfiles, freed)
    return True


async def release(db: Database, path: str, *, me: str) -> None:
    """Forget the row :func:`reserve` created when the write then failed (unless the content
    is referenced or pinned by another owner meanwhile).

    Raises:
        StorageError: the database is unusable.
    """
    async with db.lock:
        async with db.tx("abandoning a file") as conn:
            await conn.execute(
                "DELETE FROM media WHERE path=? AND owner=? AND NOT EXISTS(SELECT 1 FROM resources WHERE path=?)",
                (path, me, path),
            )


class Ledger:
    """:class:`bot.store.media.MediaLedger` over one database, for one owner.

    Args:
        db: the open database.
        me: the owner id of this process (:class:`bot.store.lease.Owner`).
        clock: current time, epoch seconds.
        rel: absolute path -> stored path (relative to the data directory).
        resolve: stored path -> absolute path.
        max_media_bytes: the quota in bytes, or ``None`` (record only).
        max_age_days: ``[storage] max_age_days``, or ``None``.
        where: the media directory, for the error sentence.
    """

    def __init__(
        self,
        db: Database,
        me: str,
        clock: Callable[[], float],
        rel: Callable[[Path], str],
        resolve: Callable[[str], Path],
        *,
        max_media_bytes: int | None,
        max_age_days: float | None,
        where: Path,
    ) -> None:
        self.db, self.me, self.clock, self.rel, self.resolve = db, me, clock, rel, resolve
        self.max_media_bytes, self.max_age_days, self.where = max_media_bytes, max_age_days, where

    async def reserve(self, path: Path, size: int) -> bool:
        """:func:`reserve` for an absolute path. Raises :class:`StorageError` (full, unusable)."""
        return await reserve(
            self.db, self.rel(path), size, now=self.clock(), max_age_days=self.max_age_days,
            max_media_bytes=self.max_media_bytes, resolve=self.resolve, me=self.me, where=self.where,
        )

    async def release(self, path: Path) -> None:
        """:func:`release` for an absolute path. Raises :class:`StorageError` (unusable)."""
        await release(self.db, self.rel(path), me=self.me)
