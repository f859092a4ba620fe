"""The store's shared bookkeeping, as SQLAlchemy Core statements for both databases: process
owners and their heartbeat leases, interrupted turns, retention and the media quota, delivery
claims and the per-user limits shared by every process.

The rules are pure functions elsewhere: owners and leases (:mod:`bot.store.lease`:
:func:`~bot.store.lease.live_owners`), what retention deletes (:func:`bot.store.retention.plan`).
Where the databases differ: :mod:`bot.store.sql.dialect`. Every function here runs inside the
caller's transaction (``conn``, a :class:`~bot.store.sql.threads.Tx`) unless it says otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import aiofiles.os
from sqlalchemy import and_, delete, exists, func, literal, select, update, union_all

from .. import lease
from ..lease import INTERRUPTED, RECENT_SECONDS
from ..retention import SECONDS_PER_DAY, Activity, MediaFile, Plan
from .database import Database
from .dialect import Tx, advisory_lock, insert, lock_rows, skip_locked, upsert
from .schema import conversations as C, deliveries as D, media as M, owners as O, rate_limits as RL
from .schema import resources as R, run_slots as S, turns as T

log = logging.getLogger(__name__)

DELIVERY_KEEP_SECONDS = 24 * 3600.0
"""How long a claimed delivery key is remembered (Slack retries within minutes)."""


async def sweep(conn: Tx, *, now: float, me: str | None) -> set[str]:
    """Delete the rows of owners that are gone (:func:`bot.store.lease.live_owners`); the live ids."""
    rows = (await conn.execute(select(O.c.id, O.c.host, O.c.pid, O.c.heartbeat))).all()
    live = lease.live_owners([tuple(r) for r in rows], now=now, me=me)
    gone = [r[0] for r in rows if r[0] not in live]
    if gone:
        await conn.execute(delete(O).where(O.c.id.in_(gone)))
        await conn.execute(delete(S).where(S.c.owner.in_(gone)))
    return live


async def mark_orphans(conn: Tx, *, now: float, me: str | None) -> list[tuple[str, int]]:
    """Mark running turns whose owner is gone as ``"failed"`` / :data:`INTERRUPTED`.

    Returns:
        ``(conversation id, turn index)`` of each turn marked.
    """
    await sweep(conn, now=now, me=me)
    stmt = (
        update(T)
        .where(T.c.status == "running", (T.c.owner.is_(None)) | ~T.c.owner.in_(select(O.c.id)))
        .values(status="failed", error=INTERRUPTED, finished=now)
        .returning(T.c.conversation_id, T.c.idx)
    )
    return [(r[0], int(r[1])) for r in (await conn.execute(stmt)).all()]


async def beat(db: Database, owner_id: str, *, now: float, orphans: bool) -> list[tuple[str, int]]:
    """Renew ``owner_id``'s lease (re-registering it if another process judged it gone) and, with
    ``orphans``, mark the turns of gone owners (its own transaction).

    Returns:
        The turns marked, as :func:`mark_orphans`.
    """
    async with db.tx("renewing the process lease") as conn:
        await conn.execute(upsert(conn, O, {"id": owner_id, "host": lease.HOST, "pid": os.getpid(), "started": now,
                                            "heartbeat": now}, [O.c.id], {"heartbeat": now}))
        return await mark_orphans(conn, now=now, me=owner_id) if orphans else []


async def unregister(db: Database, owner_id: str, *, now: float) -> None:
    """Mark ``owner_id``'s running turns interrupted, release its pins and slots, remove its row."""
    async with db.tx("closing the store") as conn:
        await conn.execute(update(T).where(T.c.status == "running", T.c.owner == owner_id)
                           .values(status="failed", error=INTERRUPTED, finished=now))
        await conn.execute(update(M).where(M.c.owner == owner_id).values(owner=None))
        await conn.execute(delete(S).where(S.c.owner == owner_id))
        await conn.execute(delete(O).where(O.c.id == owner_id))


# -- retention (rules: bot.store.retention) ----------------------------------------------------

async def snapshot(conn: Tx, *, now: float, me: str | None
                   ) -> tuple[list[Activity], list[tuple[str, str]], dict[str, MediaFile]]:
    """The inputs of :func:`bot.store.retention.plan` (after removing gone owners)."""
    await sweep(conn, now=now, me=me)
    recent = now - RECENT_SECONDS
    running = exists().where(T.c.conversation_id == C.c.id, T.c.status == "running")
    rows = (await conn.execute(select(C.c.id, C.c.updated, running).order_by(C.c.updated, C.c.created))).all()
    conversations = [(cid, updated, bool(run) or updated >= recent) for cid, updated, run in rows]
    pinned = and_(M.c.owner.is_not(None), M.c.owner.in_(select(O.c.id)))
    files = {
        path: MediaFile(size, used, bool(pin) or used >= recent)
        for path, size, used, pin in (await conn.execute(select(M.c.path, M.c.size, M.c.used, pinned))).all()
    }
    refs = []
    for cid, path, size in (await conn.execute(select(R.c.conversation_id, R.c.path, R.c.size))).all():
        refs.append((cid, path))
        files.setdefault(path, MediaFile(size, 0.0, False))
    return conversations, refs, files


async def idle_total(conn: Tx, *, now: float, me: str | None, max_age_days: float | None,
                     max_media_bytes: int | None) -> int | None:
    """Whether :func:`bot.store.retention.plan` has anything to delete, found by indexed ranges
    (``conversations_updated``, ``media_used``, ``resources_path``) instead of a whole snapshot:
    with ``max_age_days``, an unprotected conversation idle past the cutoff, or an unreferenced,
    unpinned file unused past it; with ``max_media_bytes``, recorded files over the quota (the
    ``media`` table, which records every referenced file: revision 0003, ``add_resource``).
    Removes gone owners first (:func:`sweep`).

    Returns:
        Bytes of the recorded media files when nothing is due; ``None`` when something may be.
    """
    await sweep(conn, now=now, me=me)
    if max_age_days is not None:
        cutoff = min(now - max_age_days * SECONDS_PER_DAY, now - RECENT_SECONDS)
        running = exists().where(T.c.conversation_id == C.c.id, T.c.status == "running")
        if (await conn.execute(select(C.c.id).where(C.c.updated < cutoff, ~running).limit(1))).first():
            return None
        pinned = and_(M.c.owner.is_not(None), M.c.owner.in_(select(O.c.id)))
        stale = select(M.c.path).where(M.c.used < cutoff, ~pinned, ~exists().where(R.c.path == M.c.path)).limit(1)
        if (await conn.execute(stale)).first():
            return None
    total = int((await conn.execute(select(func.coalesce(func.sum(M.c.size), 0)))).scalar())
    return None if max_media_bytes is not None and total > max_media_bytes else total


async def delete_rows(conn: Tx, p: Plan) -> None:
    """Delete the plan's conversations (their rows cascade) and file rows."""
    if p.conversations:
        await conn.execute(delete(C).where(C.c.id.in_(p.conversations)))
    if p.files:
        await conn.execute(delete(M).where(M.c.path.in_(p.files)))


async def unlink_unrecorded(db: Database, paths: Sequence[str], resolve: Callable[[str], Path]) -> tuple[int, int]:
    """Delete the files of ``paths`` no row records or references any more (its own transaction,
    holding a row lock on each path's media row check); ``(files deleted, bytes freed)``."""
    files = freed = 0
    if not paths:
        return 0, 0
    async with db.tx("deleting media files") as conn:
        for path in paths:
            used = union_all(select(literal(1)).where(M.c.path == path), select(literal(1)).where(R.c.path == path))
            if (await conn.execute(select(exists(used.subquery().select())))).scalar():
                continue  # stored again meanwhile
            target = resolve(path)
            try:
                size = (await aiofiles.os.stat(target)).st_size
                await aiofiles.os.unlink(target)
                files, freed = files + 1, freed + size
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("could not delete media file %s: %s", target, e)
    return files, freed


async def media_bytes(db: Database) -> int:
    """Bytes of the recorded media files (each counted once)."""
    rows = await db.read("measuring media", select(func.coalesce(func.sum(M.c.size), 0)))
    return int(rows[0][0])


# -- shared deliveries and limits --------------------------------------------------------------

async def claim(conn: Tx, keys: Sequence[str], *, now: float, owner: str, payload: str | None) -> bool:
    """Record ``keys`` unless one of them is recorded already (see
    :meth:`ConversationStore.claim_delivery`; ``payload`` goes with the first key); a concurrent
    claim of the same key waits for the first transaction, then fails."""
    rows = (await conn.execute(
        insert(conn, D).values([{"key": k, "at": now, "owner": owner, "payload": payload if i == 0 else None}
                          for i, k in enumerate(keys)]).on_conflict_do_nothing().returning(D.c.key)
    )).all()
    if len(rows) != len(set(keys)):
        raise Taken()
    await conn.execute(delete(D).where(D.c.at < now - DELIVERY_KEEP_SECONDS))
    return True


async def adopt(conn: Tx, *, me: str, prefix: str) -> list[tuple[str, str]]:
    """Take the unsettled deliveries of gone owners whose key starts with ``prefix`` (after
    :func:`sweep`), each by one process
    (``FOR UPDATE SKIP LOCKED``: processes sweeping at once split them); ``[(key, payload)]``."""
    live = select(O.c.id)
    orphaned = (D.c.payload.is_not(None), func.substr(D.c.key, 1, len(prefix)) == prefix,
                D.c.owner.is_(None) | ~D.c.owner.in_(live))
    pending = skip_locked(conn, select(D.c.key).where(*orphaned))
    # the conditions again on the UPDATE itself: a row another process took meanwhile (its owner
    # now live) is re-checked after that transaction commits and left alone
    rows = (await conn.execute(update(D).where(D.c.key.in_(pending.scalar_subquery()), *orphaned).values(owner=me)
                               .returning(D.c.key, D.c.payload))).all()
    return [(r[0], r[1]) for r in rows]


class Taken(Exception):
    """A key was claimed before: roll the claim back."""


async def take_rate(conn: Tx, key: str, *, limit: int, period: float, now: float) -> float:
    """Count one request of ``key`` under ``limit`` per ``period`` seconds (GCRA, ITU-T I.371: a
    burst of ``limit``, then one every ``period / limit`` seconds).

    Returns:
        ``0.0`` when allowed (and counted); otherwise seconds until one more request fits.
    """
    interval = period / limit
    row = (await conn.execute(lock_rows(conn, select(RL.c.tat).where(RL.c.key == key)))).first()
    tat = max(row[0] if row else now, now)
    wait = tat - now - (period - interval)
    if wait > 0:
        return wait
    await conn.execute(upsert(conn, RL, {"key": key, "tat": tat + interval}, [RL.c.key], {"tat": tat + interval}))
    return 0.0


async def take_slots(conn: Tx, wanted: Sequence[tuple[str, str, int]], *, owner: str, now: float) -> list[bool]:
    """Reserve each ``(key, slot, limit)`` of ``wanted``, in order, if fewer than ``limit`` slots of
    its key are held by live owners (the slots of gone owners are deleted with them first,
    :func:`sweep`); whether each was taken."""
    for key in sorted({key for key, _, _ in wanted}):  # one order: two batches never wait for each other in a cycle
        await advisory_lock(conn, key)
    await sweep(conn, now=now, me=owner)
    live = select(O.c.id).where(O.c.heartbeat >= now - lease.LEASE_SECONDS)
    taken = []
    for key, slot, limit in wanted:
        held = (await conn.execute(select(func.count()).select_from(S).where(S.c.key == key, S.c.owner.in_(live)))).scalar()
        taken.append(int(held or 0) < limit)
        if taken[-1]:
            await conn.execute(S.insert().values(id=slot, key=key, owner=owner, at=now))
    return taken


async def release_slots(conn: Tx, slots: Sequence[str]) -> None:
    """Give back run slots ``slots`` (nothing for one that is gone already)."""
    await conn.execute(delete(S).where(S.c.id.in_(list(slots))))


class SlotQueue:
    """Run-slot reservations taken together: those that arrive while a transaction takes others
    wait for it and go in the next one (as a group commit), so a burst of requests costs a few
    write transactions instead of one each, and each request waits for the writer about once.

    Args:
        database: the store's database.
        owner: this process's owner id (a function: it is known once the store is open).
        clock: current time in epoch seconds.
    """

    def __init__(self, database: Database, owner: Callable[[], str], clock: Callable[[], float]) -> None:
        self.database, self._owner, self._clock = database, owner, clock
        self._waiting: list[tuple[str, str, int, asyncio.Future[bool]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def take(self, key: str, slot: str, limit: int) -> bool:
        """Reserve ``slot`` of ``key`` (see :func:`take_slots`); whether it was taken. A caller
        cancelled meanwhile leaves nothing held (a slot taken for it is given back).

        Raises:
            StorageError: the database failed.
        """
        waiting = asyncio.get_running_loop().create_future()
        self._waiting.append((key, slot, limit, waiting))
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush(), name="run slot reservations")
        return await waiting

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    taken = await self.database.atomic("reserving run slots", take_slots, [b[:3] for b in batch],
                                                       owner=self._owner(), now=self._clock(), durable=False, first=True)
                except BaseException as e:
                    for *_, waiting in batch:
                        if waiting.done():
                            continue
                        if isinstance(e, Exception):
                            waiting.set_exception(e)
                        else:
                            waiting.cancel()
                    if not isinstance(e, Exception):
                        raise
                    continue
                gone = [slot for (_, slot, _, waiting), ok in zip(batch, taken) if ok and waiting.done()]
                for (*_, waiting), ok in zip(batch, taken):
                    if not waiting.done():
                        waiting.set_result(ok)
                if gone:  # not durable: a slot lost with the machine's power was held by a process gone with it
                    await self.database.atomic("releasing run slots", release_slots, gone, durable=False)
        finally:
            self._flushing = None
