"""Retention and the media quota: ``prune``, ``forget`` and the ledger the media store writes
through. The rules and the decision are :mod:`bot.store.retention`'s
(:func:`~bot.store.retention.plan`); this module applies them with SQLAlchemy Core, on both
databases.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import and_, case, delete, exists, func, select, update

from ...errors import StorageError
from ..protocol import PruneReport
from ..retention import Plan, plan
from . import upkeep
from .database import Database
from .dialect import RETENTION_LOCK, Tx, advisory_lock, insert, lock_rows, upsert
from .schema import conversations as C, media as M, owners as O, resources as R, turns as T

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MediaPaths:
    """Media paths as stored: relative to the data directory when inside it, else absolute."""

    data_dir: Path

    def rel(self, path: Path) -> str:
        """The stored form of the absolute ``path``."""
        try:
            return str(Path(path).resolve().relative_to(self.data_dir))
        except ValueError:
            return str(Path(path).resolve())

    def resolve(self, stored: str) -> Path:
        """The absolute path of a stored one (one ``Path`` built: a chat-log load resolves every
        file of the conversation)."""
        return Path(stored) if os.path.isabs(stored) else self.data_dir / stored


async def record_media(conn: Tx, rel: str, size: int, now: float, me: str | None) -> None:
    """Record a referenced file (also from writers without a ledger) and unpin it: a resource row
    references it now."""
    unpin = case((M.c.owner == me, None), else_=M.c.owner)
    await conn.execute(upsert(conn, M, {"path": rel, "size": size, "created": now, "used": now}, [M.c.path],
                              {"used": now, "owner": unpin}))


async def prune(db: Database, paths: MediaPaths, *, now: float, me: str | None, max_age_days: float | None,
                max_media_bytes: int | None) -> PruneReport:
    """See :meth:`bot.store.protocol.Upkeep.prune` (rules: :mod:`bot.store.retention`): when
    :func:`~bot.store.sql.upkeep.idle_total` finds nothing due by indexed ranges, only the media
    sizes are read; otherwise the whole :func:`~bot.store.retention.plan`."""
    limits = {"max_age_days": max_age_days, "max_media_bytes": max_media_bytes}
    async with db.tx("pruning") as conn:
        await advisory_lock(conn, RETENTION_LOCK)
        total = await upkeep.idle_total(conn, now=now, me=me, **limits)
        if total is not None:  # nothing to delete: no conversation or resource row was read
            return PruneReport(0, 0, 0, total)
        p = plan(*await upkeep.snapshot(conn, now=now, me=me), now=now, **limits)
        await upkeep.delete_rows(conn, p)
    nfiles, freed = await upkeep.unlink_unrecorded(db, p.files, paths.resolve)
    report = PruneReport(len(p.conversations), nfiles, freed, await upkeep.media_bytes(db))
    if p.conversations or p.files:
        log.info("pruned %s: %s", db.name, report)
    return report


async def forget(db: Database, paths: MediaPaths, conversation_id: str, *, now: float, me: str | None) -> bool:
    """See :meth:`bot.store.protocol.Upkeep.forget` (refused while a live process runs a turn in it)."""
    async with db.tx("forgetting a conversation") as conn:
        if (await conn.execute(lock_rows(conn, select(C.c.id).where(C.c.id == conversation_id)))).first() is None:
            return False
        await upkeep.mark_orphans(conn, now=now, me=me)
        running = select(T.c.idx).where(T.c.conversation_id == conversation_id, T.c.status == "running")
        if (await conn.execute(running)).first() is not None:
            raise StorageError(
                f"Conversation {conversation_id} has a turn running in a live process; try again when it has"
                " finished.", f"forget refused: running turn in {conversation_id} ({db.name})",
            )
        files = select(R.c.path).where(R.c.conversation_id == conversation_id).distinct()
        found = [r[0] for r in (await conn.execute(files)).all()]
        await conn.execute(delete(C).where(C.c.id == conversation_id))
        doomed = []
        for path in found:
            shared = exists().where(R.c.path == path)
            pinned = exists().where(M.c.path == path, M.c.owner.in_(select(O.c.id)))
            if not (await conn.execute(select(shared | pinned))).scalar():
                doomed.append(path)
        if doomed:
            await conn.execute(delete(M).where(M.c.path.in_(doomed)))
    await upkeep.unlink_unrecorded(db, doomed, paths.resolve)
    return True


def media_full(where: Path, size: int, quota: int, used: int) -> StorageError:
    """The error for a file that does not fit under ``[storage] max_media_bytes``."""
    msg = (
        f"The media storage {where} is full: a {size:,}-byte file does not fit in [storage] max_media_bytes"
        f" = {quota:,} ({used:,} bytes are in use by running or recent conversations and files);"
        " raise [storage] max_media_bytes or prune (hugginggpt store prune / forget)."
    )
    log.error("media quota: refused %d bytes in %s: %d of %d in use and protected", size, where, used, quota)
    return StorageError(msg)


class Ledger:
    """:class:`bot.store.media.MediaLedger` over the open store, for this process: every media file
    is recorded, pinned by this process, before it is written; room is made under
    ``max_media_bytes`` first (rules: :mod:`bot.store.retention`).

    Args:
        db: the open database; me: this process's owner id; clock: current time, epoch seconds;
        paths: how paths are stored; max_media_bytes, max_age_days: the ``[storage]`` limits.
    """

    def __init__(self, db: Database, me: str, clock: Callable[[], float], paths: MediaPaths, *,
                 max_media_bytes: int | None, max_age_days: float | None) -> None:
        self.db, self.me, self.clock, self.paths = db, me, clock, paths
        self.max_media_bytes, self.max_age_days = max_media_bytes, max_age_days

    async def reserve(self, path: Path, size: int) -> bool:
        """Record ``path`` (``size`` bytes) as about to be written.

        Returns:
            ``True`` if the row is new (dropped again by :meth:`release` if the write fails).

        Raises:
            StorageError: the file does not fit even after deleting everything unprotected, or the
                database is unusable.
        """
        rel, now, me = self.paths.rel(path), self.clock(), self.me
        p = await self.db.atomic("saving a file", self._reserve, rel, size, now, me)
        if p is None:
            return False
        if p.files:
            nfiles, freed = await upkeep.unlink_unrecorded(self.db, p.files, self.paths.resolve)
            log.info("media quota: made room for %d bytes in %s: %d conversation(s), %d file(s), %d bytes",
                     size, self.db.name, len(p.conversations), nfiles, freed)
        return True

    async def _reserve(self, conn: Tx, rel: str, size: int, now: float, me: str) -> Plan | None:
        """In one write transaction: mark ``rel`` used (``None``: it was recorded already), or
        record it after making room for it; what was deleted to make room."""
        live_pin = and_(M.c.owner.is_not(None), M.c.owner != me, M.c.owner.in_(select(O.c.id)))
        touched = (await conn.execute(update(M).where(M.c.path == rel).values(
            used=now, owner=case((live_pin, M.c.owner), else_=me)).returning(M.c.path))).first()
        if touched:
            return None
        p = await self._make_room(conn, size, now) if self.max_media_bytes is not None else Plan()
        await conn.execute(insert(conn, M).values(path=rel, size=size, created=now, used=now, owner=me)
                           .on_conflict_do_nothing())
        return p

    async def _make_room(self, conn: Tx, size: int, now: float) -> Plan:
        """Delete the rows retention chooses so that ``size`` more bytes fit (the files after commit)."""
        quota = self.max_media_bytes or 0
        await advisory_lock(conn, RETENTION_LOCK)
        total = (await conn.execute(select(func.coalesce(func.sum(M.c.size), 0)))).scalar()
        if int(total) + size <= quota:
            return Plan()
        p = plan(*await upkeep.snapshot(conn, now=now, me=self.me), now=now, max_age_days=self.max_age_days,
                 max_media_bytes=quota, incoming=size)
        if not p.fits:
            raise media_full(self.paths.data_dir / "media", size, quota, p.total)
        await upkeep.delete_rows(conn, p)
        return p

    async def release(self, path: Path) -> None:
        """Drop the record of a file whose write failed (unless a resource references it)."""
        rel = self.paths.rel(path)
        async with self.db.tx("abandoning a file") as conn:
            await conn.execute(delete(M).where(M.c.path == rel, M.c.owner == self.me, ~exists().where(R.c.path == rel)))
