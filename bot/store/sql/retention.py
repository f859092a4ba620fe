"""Retention and the media quota of the PostgreSQL store: ``prune``, ``forget`` and the ledger the
media store writes through. The rules and the decision are :mod:`bot.store.retention`'s
(:func:`~bot.store.retention.plan`); this module applies them with SQLAlchemy Core.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import and_, case, delete, exists, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from ...errors import StorageError
from ..protocol import PruneReport
from ..quota import _full
from ..retention import Plan, plan
from . import upkeep
from .database import SQLDatabase
from .schema import conversations as C, media as M, owners as O, resources as R, turns as T

log = logging.getLogger(__name__)


class SQLRetention:
    """``prune``, ``forget`` and ``media_bytes`` of :class:`bot.store.sql.postgres.PostgresStore`
    (a mixin: the store provides ``database``, ``_clock``, ``_abs`` and ``owner_id``)."""

    database: SQLDatabase
    _clock: Callable[[], float]
    _abs: Callable[[str], Path]
    owner_id: str | None

    async def _record_media(self, conn: AsyncConnection, rel: str, size: int, now: float) -> None:
        """Record a referenced file (also from writers without a ledger) and unpin it: a resource
        row references it now."""
        me = self.owner_id
        await conn.execute(insert(M).values(path=rel, size=size, created=now, used=now).on_conflict_do_update(
            index_elements=[M.c.path],
            set_={"used": now, "owner": case((M.c.owner == me, None), else_=M.c.owner)}))

    async def media_bytes(self) -> int:
        """Bytes of the recorded media files, each counted once (what the quota measures)."""
        return await upkeep.media_bytes(self.database)

    async def prune(self, *, max_age_days: float | None, max_media_bytes: int | None) -> PruneReport:
        """See :meth:`ConversationStore.prune` (rules: :mod:`bot.store.retention`)."""
        now = self._clock()
        async with self.database.tx("pruning") as conn:
            await conn.execute(select(func.pg_advisory_xact_lock(RETENTION_LOCK)))
            p = plan(*await upkeep.snapshot(conn, now=now, me=self.owner_id), now=now, max_age_days=max_age_days,
                     max_media_bytes=max_media_bytes)
            await upkeep.delete_rows(conn, p)
        nfiles, freed = await upkeep.unlink_unrecorded(self.database, p.files, self._abs)
        report = PruneReport(len(p.conversations), nfiles, freed, await self.media_bytes())
        if p.conversations or p.files:
            log.info("pruned %s: %s", self.database.name, report)
        return report

    async def forget(self, conversation_id: str) -> bool:
        """See :meth:`ConversationStore.forget` (refused while a live process runs a turn in it)."""
        now = self._clock()
        async with self.database.tx("forgetting a conversation") as conn:
            if (await conn.execute(select(C.c.id).where(C.c.id == conversation_id).with_for_update())).first() is None:
                return False
            await upkeep.mark_orphans(conn, now=now, me=self.owner_id)
            running = select(T.c.idx).where(T.c.conversation_id == conversation_id, T.c.status == "running")
            if (await conn.execute(running)).first() is not None:
                raise StorageError(
                    f"Conversation {conversation_id} has a turn running in a live process; try again when it has"
                    " finished.", f"forget refused: running turn in {conversation_id} ({self.database.name})",
                )
            paths = [r[0] for r in (await conn.execute(
                select(R.c.path).where(R.c.conversation_id == conversation_id).distinct())).all()]
            await conn.execute(delete(C).where(C.c.id == conversation_id))
            doomed = []
            for path in paths:
                shared = exists().where(R.c.path == path)
                pinned = exists().where(M.c.path == path, M.c.owner.in_(select(O.c.id)))
                if not (await conn.execute(select(shared | pinned))).scalar():
                    doomed.append(path)
            if doomed:
                await conn.execute(delete(M).where(M.c.path.in_(doomed)))
        await upkeep.unlink_unrecorded(self.database, doomed, self._abs)
        return True


RETENTION_LOCK = 0x48474755
"""Advisory lock id held while deciding what to delete (one pruner at a time)."""


class SQLLedger:
    """:class:`bot.store.media.MediaLedger` over a :class:`PostgresStore`: every media file is
    recorded, pinned by this process, before it is written; room is made under
    ``max_media_bytes`` first (rules: :mod:`bot.store.retention`).

    Args:
        store: the open :class:`bot.store.sql.postgres.PostgresStore` (its owner id, clock,
            limits and data directory).
    """

    def __init__(self, store: Any) -> None:
        self.store = store

    async def reserve(self, path: Path, size: int) -> bool:
        """Record ``path`` (``size`` bytes) as about to be written.

        Returns:
            ``True`` if the row is new (dropped again by :meth:`release` if the write fails).

        Raises:
            StorageError: the file does not fit even after deleting everything unprotected, or the
                database is unusable.
        """
        s = self.store
        rel, now, me = s._rel(path), s._clock(), s._me()
        max_bytes, max_age = s.limits
        async with s.database.tx("saving a file") as conn:
            live_pin = and_(M.c.owner.is_not(None), M.c.owner != me, M.c.owner.in_(select(O.c.id)))
            touched = (await conn.execute(update(M).where(M.c.path == rel).values(
                used=now, owner=case((live_pin, M.c.owner), else_=me)).returning(M.c.path))).first()
            if touched:
                return False
            p = Plan()
            if max_bytes is not None:
                await conn.execute(select(func.pg_advisory_xact_lock(RETENTION_LOCK)))
                total = (await conn.execute(select(func.coalesce(func.sum(M.c.size), 0)))).scalar()
                if int(total) + size > max_bytes:
                    p = plan(*await upkeep.snapshot(conn, now=now, me=me), now=now, max_age_days=max_age,
                             max_media_bytes=max_bytes, incoming=size)
                    if not p.fits:
                        raise _full(s.data_dir / "media", size, max_bytes, p.total)
                    await upkeep.delete_rows(conn, p)
            await conn.execute(insert(M).values(path=rel, size=size, created=now, used=now, owner=me)
                               .on_conflict_do_nothing())
        if p.files:
            await upkeep.unlink_unrecorded(s.database, p.files, s._abs)
        return True

    async def release(self, path: Path) -> None:
        """Drop the record of a file whose write failed (unless a resource references it)."""
        s = self.store
        rel = s._rel(path)
        async with s.database.tx("abandoning a file") as conn:
            await conn.execute(delete(M).where(M.c.path == rel, M.c.owner == s._me(), ~exists().where(R.c.path == rel)))
