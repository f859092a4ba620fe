"""The conversation store: threads as multi-turn conversations, and the files in them, on SQLite
(the default: one file in the data directory, nothing to install) or PostgreSQL (``[storage]
database_url``, for several bot processes), with SQLAlchemy Core.

HuggingGPT plans with the chat log in view (Shen et al., NeurIPS 2023, §3.1: the chat history lets
the planner trace resources the user mentioned earlier). This store keeps that log:

* a *conversation* per platform + workspace/guild + channel + thread (:class:`ConversationKey`),
  with a short stable id;
* per *turn*: the user's text and files, the plan, model choices, results, answer, generated files,
  timings and status (the whole :meth:`RunRecord.to_json` document, plus a condensed answer);
* *resources*: every file a user sends and every file a task generates, with a short id unique
  within the conversation (``image-1``, ``audio-1``, ``image-2`` ... numbered per kind), its kind,
  origin (``"user"`` or ``"task:N"``, and the turn) and a one-line description.

Media files live in a directory every process shares (:class:`bot.store.media.MediaStore`; paths
relative to the data directory). Sharing rules: :mod:`bot.store.lease`, :mod:`bot.store.retention`;
where the databases differ: :mod:`bot.store.sql.dialect` (a turn's index and a resource's number
are taken holding the conversation's row, deliveries claimed with a unique key, run slots under an
advisory lock; on SQLite every write transaction holds the file). Schema: :mod:`bot.store.sql.migrate`.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, func, select, update

from pipeline.catalog.servers import RegisteredServer
from pipeline.errors import HuggingGPTError
from pipeline.types import MODALITIES, Modality, Resource, ResourceSink, RunRecord, Turn

from ...errors import StorageError
from ...incoming import ConversationKey
from ...tokens import TURN_OVERHEAD_TOKENS, HistoryFill, count_json_tokens, count_tokens
from .. import lease
from ..chatlog import turn_views
from ..handover import Handover
from ..lease import RECENT_SECONDS, new_owner_id
from ...stored import Limit, Order, Origin, Overspent, Payer, Scope, Settled, SpendRow, StoredFile
from ..protocol import MediaWriter, PruneReport, TurnSink
from ..text import clip_summary, valid_utf8
from . import experts, listing, resource_cache, retention, spend, turns, upkeep
from .database import Database
from .dialect import Tx, greatest, insert, lock_conversation, upsert
from .schema import conversations as C, deliveries as D, feedback as F, resources as R
from .schema import pending_plans as P, turn_records as TR, turns as T

log = logging.getLogger(__name__)

_NEWEST = (select(T.c.idx, T.c.user_text, T.c.summary, T.c.status, T.c.tokens)
           .where(T.c.conversation_id == bindparam("cid"), T.c.status != "running")
           .order_by(T.c.idx.desc()).limit(bindparam("n")))
_OLDER = _NEWEST.where(T.c.idx < bindparam("before"))  # the next page, when the first left room in the budget
FIRST_PAGE = 16
"""Turns the chat log's first read takes (more follow, 4 times as many each time, while the budget
has room: a read never takes more turns than ``[storage] context_tokens`` could hold)."""
_TURNS = (select(T.c.idx, T.c.user, T.c.user_text, func.coalesce(TR.c.answer, ""), T.c.summary, T.c.status,
                 T.c.error, T.c.created, T.c.finished, TR.c.record)
          .select_from(T.outerjoin(TR, (TR.c.conversation_id == T.c.conversation_id) & (TR.c.idx == T.c.idx)))
          .where(T.c.conversation_id == bindparam("cid")).order_by(T.c.idx))


def _gone(where: str, what: str, name: str) -> StorageError:
    return StorageError("This conversation no longer exists; start a new thread.", f"{where}: unknown {what} in {name}")


async def _get_or_create(conn: Tx, key: ConversationKey, *, now: float) -> str:
    """The id of the conversation of ``key``, marked as used at ``now``, created if new (see
    :meth:`SQLStore.get_or_create`); inside the caller's write transaction."""
    skey = key.as_string()
    row = (await conn.execute(update(C).where(C.c.key == skey).values(
        updated=greatest(conn, C.c.updated, now)).returning(C.c.id))).first()
    if row:
        return row[0]
    while True:
        cid = secrets.token_hex(5)
        row = (await conn.execute(
            insert(conn, C).values(id=cid, key=skey, created=now, platform=key.platform, workspace=key.workspace,
                                   channel=key.channel, thread=key.thread, updated=now)
            .on_conflict_do_nothing().returning(C.c.id))).first()
        if row:
            return cid
        row = (await conn.execute(select(C.c.id).where(C.c.key == skey))).first()
        if row:  # another process created it meanwhile
            return row[0]


async def _set_payload(conn: Tx, key: str, payload: str | None) -> None:
    """Keep ``payload`` with the unsettled delivery ``key`` (``None``: settle it)."""
    await conn.execute(update(D).where(D.c.key == key, D.c.payload.is_not(None)).values(payload=payload))


class SQLStore:
    """:class:`bot.store.protocol.ConversationStore` on one database plus a media directory.

    Args:
        database: the :class:`Database` (``Database(path=data_dir / DB_NAME)`` or ``Database(url=...)``).
        data_dir: the data directory (media files live under it; shared by every process).
        media: the media store (:class:`bot.store.media.MediaStore`) or anything with its ``put``.
        events: where interrupted turns and deliveries taken over are published (the service's
            :class:`Handover`; default: a channel nobody listens to).
        clock: current time in epoch seconds (tests move time with it).
        max_media_bytes, max_age_days: ``[storage]`` limits (the quota at write time, enforced
            through ``media`` when it is a :class:`MediaStore`; ``max_age_days`` orders what it deletes).
        upgrade: apply pending migrations at :meth:`open` (``False``: refuse a database that
            needs them; ``hugginggpt db upgrade`` applies them).
    """

    def __init__(
        self, database: Database, data_dir: Path, media: MediaWriter, *, events: Handover | None = None,
        clock: Callable[[], float] = time.time, max_media_bytes: int | None = None, max_age_days: float | None = None,
        upgrade: bool = True,
    ) -> None:
        self.database = database
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.paths = retention.MediaPaths(self.data_dir)
        self.path: Path | str = database.path or database.name  # for messages; the SQLite file's Path
        self.media = media
        self.events = events or Handover()
        self._clock = clock
        self.limits = (max_media_bytes, max_age_days)
        self.upgrade = upgrade
        self.owner_id: str | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._resources = resource_cache.ResourceCache(self._resource)
        self._slots = upkeep.SlotQueue(database, self._me, clock)

    # -- life cycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, migrate (or refuse, see ``upgrade``), register this process as an owner with
        its heartbeat, and become the media store's ledger (the quota at write time).

        Raises:
            StorageError: the SQLite file is corrupt, locked, another program's or not writable;
                wrong URL or credentials, unreachable, read-only; a newer schema, or pending
                migrations with ``upgrade=False``. Nothing is written then.
        """
        await self.database.open(upgrade=self.upgrade)
        owner = new_owner_id()
        try:
            await upkeep.beat(self.database, owner, now=self._clock(), orphans=False)
        except BaseException:
            await self.database.close()
            raise
        self.owner_id = owner
        self._heartbeat = asyncio.create_task(self._beat_forever(), name=f"store heartbeat {owner}")
        if hasattr(self.media, "ledger"):
            max_bytes, max_age = self.limits
            self.media.ledger = retention.Ledger(  # type: ignore[attr-defined]
                self.database, owner, self._clock, self.paths, max_media_bytes=max_bytes, max_age_days=max_age)

    async def close(self) -> None:
        """Stop the heartbeat, mark this process's running turns interrupted, release its pins and
        run slots, remove its owner row, close the connections; safe to call twice."""
        if getattr(getattr(self.media, "ledger", None), "db", None) is self.database:
            self.media.ledger = None  # type: ignore[attr-defined]
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        owner, self.owner_id = self.owner_id, None
        if owner is not None and self.database.is_open:
            try:
                await upkeep.unregister(self.database, owner, now=self._clock())
            except StorageError as e:
                log.warning("could not release owner %s: %s", owner, e)
        await self.database.close()

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(lease.HEARTBEAT_SECONDS)
            try:
                marked = await upkeep.beat(self.database, self._me(), now=self._clock(), orphans=True)
                await self._tell(marked)
                await self.adopt_deliveries()
            except StorageError as e:
                log.warning("heartbeat of %s failed: %s", self.owner_id, e)

    async def _tell(self, marked: list[tuple[str, int]]) -> None:
        """Publish turns marked interrupted with their conversation keys (deleted ones left out)."""
        if not marked:
            return
        log.warning("%s: marked %d turn(s) of gone processes as interrupted", self.path, len(marked))
        told = []
        for cid, idx in marked:
            key = await self.find(cid)
            if key is not None:
                told.append((key, idx))
        await self.events.interrupted(told)

    def _me(self) -> str:
        if self.owner_id is None:
            raise StorageError(f"The conversation database {self.path} is not open.")
        return self.owner_id

    async def __aenter__(self) -> SQLStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- conversations ---------------------------------------------------------------------------

    async def get_or_create(self, key: ConversationKey) -> str:
        """See :meth:`Conversations.get_or_create` (10 hex characters; looking up a conversation
        idle for 5 minutes or more counts as using it, so no process prunes it before its turn)."""
        skey = key.as_string()
        rows = await self.database.read("looking up a conversation", select(C.c.id, C.c.updated).where(C.c.key == skey))
        if rows and rows[0][1] >= self._clock() - RECENT_SECONDS / 2:
            return rows[0][0]
        return await self.database.atomic("looking up a conversation", _get_or_create, key, now=self._clock())

    async def find(self, conversation_id: str) -> ConversationKey | None:
        """See :meth:`Conversations.find`."""
        rows = await self.database.read("looking up a conversation", select(
            C.c.platform, C.c.workspace, C.c.channel, C.c.thread).where(C.c.id == conversation_id))
        return ConversationKey(*rows[0]) if rows else None

    async def retire(self, key: ConversationKey) -> str | None:
        """See :meth:`Conversations.retire` (the old conversation keeps its id and turns)."""
        async with self.database.tx("starting a new conversation") as conn:
            row = (await conn.execute(update(C).where(C.c.key == key.as_string())
                                      .values(key=C.c.key + "#retired-" + C.c.id).returning(C.c.id))).first()
        return row[0] if row else None

    async def record_feedback(self, conversation_id: str, turn: int, user: str, verdict: str) -> bool:
        """See :meth:`Conversations.record_feedback`."""
        async with self.database.tx("storing feedback") as conn:
            known = select(T.c.idx).where(T.c.conversation_id == conversation_id, T.c.idx == turn)
            if (await conn.execute(known)).first() is None:
                return False
            now = self._clock()
            await conn.execute(upsert(conn, F, {"conversation_id": conversation_id, "idx": turn, "user": user,
                                                "verdict": verdict, "at": now},
                                      [F.c.conversation_id, F.c.idx, F.c.user], {"verdict": verdict, "at": now}))
        return True

    # -- deliveries ------------------------------------------------------------------------------

    async def claim_delivery(self, keys: Sequence[str], payload: str | None = None) -> bool:
        """See :meth:`Deliveries.claim_delivery` (a unique key per delivery; keys older than a day
        are deleted as new ones arrive)."""
        try:
            return await self.database.atomic("recording a delivery", upkeep.claim, list(keys), now=self._clock(),
                                              owner=self._me(), payload=payload)
        except upkeep.Taken:
            return False

    async def note_delivery(self, key: str, payload: str) -> None:
        """See :meth:`Deliveries.note_delivery`."""
        await self.database.atomic("noting a delivery", _set_payload, key, payload)

    async def settle_delivery(self, key: str) -> None:
        """See :meth:`Deliveries.settle_delivery`."""
        await self.database.atomic("settling a delivery", _set_payload, key, None)

    async def adopt_deliveries(self) -> list[tuple[str, str]]:
        """Take the unsettled deliveries of gone processes whose key starts with the prefix a front
        end subscribed for (:meth:`Handover.on_redelivery`) and publish them; ``[(key, payload)]``."""
        prefix = self.events.delivery_prefix
        if prefix is None:
            return []
        async with self.database.tx("taking over deliveries") as conn:
            adopted = await upkeep.adopt(conn, me=self._me(), prefix=prefix)
        await self.events.redelivered(self.path, adopted)
        return adopted

    # -- turns -------------------------------------------------------------------------------------

    async def begin_turn(self, conversation_id: str, user_text: str, user: str | None, delivery: str | None = None) -> int:
        """See :meth:`Conversations.begin_turn` (the index is taken holding the conversation's row)."""
        now, me = self._clock(), self._me()
        user_text = valid_utf8(user_text)
        user = valid_utf8(user) if user is not None else None
        idx = await self.database.run("starting a turn", turns.begin, conversation_id, text=user_text, user=user,
                                      tokens=count_tokens(user_text), now=now, owner=me, delivery=delivery)
        if idx is None:
            raise _gone("begin_turn", f"conversation {conversation_id!r}", self.path)
        return idx

    async def finish_turn(self, conversation_id: str, turn: int, record: RunRecord) -> None:
        """See :meth:`Conversations.finish_turn`: status, error sentence, full and condensed answer
        (``Turn.answer``, ~300 chars) and ``record.to_json()``."""
        doc = valid_utf8(json.dumps(record.to_json(), ensure_ascii=False, default=str))
        summary = valid_utf8(clip_summary(record.response or (record.error or "")))
        response, error = valid_utf8(record.response), valid_utf8(record.error) if record.error is not None else None
        now = self._clock()
        if not await self.database.run("saving a turn", turns.finish, conversation_id, turn, status=record.status,
                                       summary=summary, error=error, answer=response, record=doc, now=now):
            raise _gone("finish_turn", f"turn {conversation_id!r}/{turn}", self.path)

    async def wait_turn(self, conversation_id: str, turn: int, *, poll: float = 0.2) -> bool:
        """See :meth:`Conversations.wait_turn` (polls every ``poll`` seconds)."""
        waited = False
        earlier = select(T.c.idx).where(T.c.conversation_id == conversation_id, T.c.idx < turn,
                                        T.c.status == "running").limit(1)
        while await self.database.read("waiting for the thread's earlier turn", earlier):
            waited = True
            await asyncio.sleep(poll)
        return waited

    async def mark_interrupted(self) -> int:
        """See :meth:`Upkeep.mark_interrupted` (by the rules of :mod:`bot.store.lease`; the
        threads are told through :attr:`events`)."""
        async with self.database.tx("marking interrupted turns") as conn:
            marked = await upkeep.mark_orphans(conn, now=self._clock(), me=self.owner_id)
        await self._tell(marked)
        return len(marked)

    async def turns(self, conversation_id: str) -> list[dict[str, Any]]:
        """See :meth:`Conversations.turns` (:func:`bot.store.chatlog.turn_views`)."""
        rows = await self.database.read("reading turns", _TURNS, params={"cid": conversation_id})
        return turn_views([tuple(r) for r in rows], await self.resources(conversation_id))

    # -- resources ---------------------------------------------------------------------------------

    def _resource(self, row: Sequence[Any]) -> Resource:
        rid, kind, path, mime, size, origin, description, turn, name = row
        return Resource(rid, kind, self.paths.resolve(path), mime, int(size), origin, description, turn, name)

    async def add_resource(
        self, conversation_id: str, turn: int, data: bytes, *, kind: Modality, mime: str, origin: str,
        description: str, name: str | None = None,
    ) -> Resource:
        """See :meth:`Conversations.add_resource`: the id is ``f"{kind}-{n}"``, ``n`` counting that
        kind within the conversation from 1 (``image-1``, ``audio-1``, ``image-2``), never reused.

        Raises:
            StorageError: disk full, unwritable or over the media quota while saving the file
                (nothing is recorded), unknown conversation, or the database is unusable.
        """
        if kind not in MODALITIES:
            raise ValueError(f"unknown resource kind {kind!r}")
        description = valid_utf8(" ".join(description.split()))
        name = valid_utf8(name) if name is not None else None
        if not await self.database.read("saving a file", select(C.c.id).where(C.c.id == conversation_id)):
            raise _gone("add_resource", f"conversation {conversation_id!r}", self.path)
        path = await self._put(data, mime)  # pinned by this process until its row is stored (bot.store.lease)
        rel, now = self.paths.rel(path), self._clock()
        res = Resource(f"{kind}-0", kind, self.paths.resolve(rel), mime, len(data), origin, description, turn, name)
        # not durable (the turn's durable finish makes it so): lost to a power cut only with its
        # unfinished turn, while the file stays recorded in the media ledger for retention
        return await self.database.atomic("saving a file", self._add_resource, conversation_id, res, rel, now,
                                          durable=False)

    async def _add_resource(self, conn: Tx, conversation_id: str, res: Resource, rel: str, now: float) -> Resource:
        """Record ``res`` (its id numbered here) in one write transaction (see :meth:`add_resource`)."""
        if not await lock_conversation(conn, C, conversation_id):
            raise _gone("add_resource", f"conversation {conversation_id!r}", self.path)
        seq, n = (await conn.execute(
            select(func.coalesce(func.max(R.c.seq).filter(R.c.kind == res.kind), 0) + 1,
                   func.coalesce(func.max(R.c.n), 0) + 1).where(R.c.conversation_id == conversation_id))).one()
        res = replace(res, id=f"{res.kind}-{seq}")
        await conn.execute(R.insert().values(
            conversation_id=conversation_id, n=n, id=res.id, kind=res.kind, path=rel, mime=res.mime, size=res.size,
            origin=res.origin, description=res.description, turn=res.turn, seq=seq, name=res.name,
            tokens=count_json_tokens(res.prompt_view()), created=now))
        await retention.record_media(conn, rel, res.size, now, self.owner_id)
        return res

    async def _put(self, data: bytes, mime: str) -> Path:
        """Write ``data`` through the media store; OS errors as one sentence naming the directory."""
        try:
            return Path(await self.media.put(data, mime))
        except HuggingGPTError:
            raise
        except OSError as e:
            reason = "the disk is full" if e.errno == errno.ENOSPC else (e.strerror or "failed").lower()
            log.error("writing a media file under %s: %s", self.data_dir, e)
            raise StorageError(f"The media directory under {self.data_dir} cannot be written: {reason}.") from None

    def sink(self, conversation_id: str, turn: int) -> ResourceSink:
        """See :meth:`Conversations.sink`."""
        return TurnSink(self, conversation_id, turn)

    async def resources(self, conversation_id: str) -> list[Resource]:
        """See :meth:`Conversations.resources` (never another conversation's)."""
        rows = await self.database.read("reading resources", select(*listing.RESOURCE_COLUMNS)
                                        .where(R.c.conversation_id == conversation_id).order_by(R.c.n))
        return [self._resource(r) for r in rows]

    async def files_of(self, platform: str, workspace: str, *, limit: int, order: Order = "desc",
                       after: tuple[str, str] | None = None, origin: Origin | None = None,
                       only: tuple[str, str] | None = None) -> list[StoredFile]:
        """See :meth:`Conversations.files_of` (keyset pagination, :mod:`bot.store.sql.listing`)."""
        mark = None
        if after is not None:
            found = await self.database.read("listing files", listing.position_of(*after))
            if not found:
                return []
            mark = tuple(found[0])
        rows = await self.database.read("listing files", listing.files_query(
            platform, workspace, limit=limit, order=order, origin=origin, only=only, after=mark))
        return [StoredFile(r[0], self._resource(r[1:10]), float(r[10])) for r in rows]

    async def context(self, conversation_id: str, budget_tokens: int) -> tuple[list[Turn], list[Resource]]:
        """See :meth:`Conversations.context` (paper §3.1): finished turns newest first within
        ``budget_tokens`` (:func:`bot.tokens.select_history`), every resource. Turns are read
        newest first in pages (:data:`FIRST_PAGE`, then 4 times as many) only while the budget has
        room, and resources only from the last one this process kept
        (:mod:`bot.store.sql.resource_cache`), so the time does not grow with the conversation's
        length; the first page and the new resources come in one read.

        Raises:
            StorageError: the database failed.
        """
        n, cid = min(FIRST_PAGE, max(budget_tokens, 0) // TURN_OVERHEAD_TOKENS), conversation_id
        since = self._resources.since(cid)
        turn_rows, res_rows = await self.database.read("loading the chat log", _NEWEST, resource_cache.SINCE,
                                                       params={"cid": cid, "n": n, "since": since})
        with_tokens = self._resources.update(cid, since, res_rows)
        if with_tokens is None:  # deleted since its resources were kept (or kept anew meanwhile)
            rows = await self.database.read("loading the chat log", resource_cache.SINCE,
                                            params={"cid": cid, "since": 0})
            with_tokens = self._resources.update(cid, 0, rows) or []
        fill = HistoryFill(with_tokens, budget_tokens)
        while fill.take(turn_rows) and len(turn_rows) == n and fill.room() > 0:
            n = min(fill.room(), 4 * n)
            turn_rows = await self.database.read("loading the chat log", _OLDER,
                                                 params={"cid": cid, "n": n, "before": turn_rows[-1][0]})
        return fill.history, [r for r, _ in with_tokens]

    # -- shared limits -------------------------------------------------------------------------------

    async def take_rate(self, key: str, limit: int, period: float) -> float:
        """See :meth:`SharedLimits.take_rate` (GCRA, ITU-T I.371)."""
        if limit <= 0:
            return 0.0
        return await self.database.atomic("counting a request", upkeep.take_rate, key, limit=limit, period=period,
                                          now=self._clock(), first=True)

    async def take_slot(self, key: str, limit: int) -> str | None:
        """See :meth:`SharedLimits.take_slot` (taken with the others waiting, :class:`upkeep.SlotQueue`)."""
        slot = secrets.token_hex(8)
        return slot if await self._slots.take(key, slot, limit) else None

    async def release_slot(self, slot: str) -> None:
        """See :meth:`SharedLimits.release_slot`."""
        # not durable: a slot lost with the machine's power was held by a process gone with it
        await self.database.atomic("releasing a run slot", upkeep.release_slots, [slot], durable=False)

    # -- plans waiting for approval (bot.approval) ----------------------------------------------------

    async def save_plan(self, plan_id: str, requester: str, payload: str, expires: float) -> None:
        """See :meth:`Approvals.save_plan` (plans expired a day ago are deleted as new ones arrive)."""
        now = self._clock()
        async with self.database.tx("keeping a plan for approval") as conn:
            await conn.execute(P.delete().where(P.c.expires < now - 86400.0))  # a day after expiry
            await conn.execute(P.insert().values(id=plan_id, requester=valid_utf8(requester), payload=valid_utf8(payload),
                                                 created=now, expires=expires))

    async def pending_plan(self, plan_id: str) -> tuple[str, str, float] | None:
        """See :meth:`Approvals.pending_plan`."""
        rows = await self.database.read("reading a plan waiting for approval",
                                        select(P.c.requester, P.c.payload, P.c.expires).where(P.c.id == plan_id))
        return (str(rows[0][0]), str(rows[0][1]), float(rows[0][2])) if rows else None

    async def take_plan(self, plan_id: str) -> bool:
        """See :meth:`Approvals.take_plan` (one ``DELETE ... RETURNING``: of two presses, one takes it)."""
        async with self.database.tx("taking a plan waiting for approval") as conn:
            return (await conn.execute(P.delete().where(P.c.id == plan_id).returning(P.c.id))).first() is not None

    # -- what runs cost (bot.budgets) ----------------------------------------------------------------

    async def reserve_spend(self, spend_id: str, payer: Payer, usd: float, limits: Sequence[Limit]) -> Overspent | None:
        """See :meth:`Spending.reserve_spend` (one transaction, :func:`bot.store.sql.spend.reserve`)."""
        return await self.database.run("reserving a budget", spend.reserve, spend_id, payer, usd, limits,
                                       now=self._clock(), durable=False)

    async def check_spend(self, payer: Payer, limits: Sequence[Limit]) -> Overspent | None:
        """See :meth:`Spending.check_spend` (one read of a row per budget, :data:`bot.store.sql.spend.CHECK`)."""
        if not limits:
            return None
        rows = await self.database.read("checking the budgets", spend.CHECK, params=spend.check_params(limits))
        return spend.first_spent(rows, limits)

    async def settle_spends(self, rows: Sequence[Settled]) -> None:
        """See :meth:`Spending.settle_spends` (one transaction)."""
        if rows:
            await self.database.run("recording what runs cost", spend.settle, list(rows))

    async def spend_report(self, scope: Scope, since: float, until: float) -> list[SpendRow]:
        """See :meth:`Spending.spend_report`."""
        rows = await self.database.read("reading what runs cost", spend.report_query(scope, since, until))
        return spend.report_rows(rows)

    # -- registered expert servers (bot.store.sql.experts) -------------------------------------------

    async def live_experts(self) -> list[RegisteredServer]:
        """See :meth:`ExpertRegistry.live_experts`."""
        return await experts.live(self.database)

    # -- retention (rules: bot.store.retention) -------------------------------------------------------

    async def media_bytes(self) -> int:
        """Bytes of the recorded media files, each counted once (what the quota measures)."""
        return await upkeep.media_bytes(self.database)

    async def prune(self, *, max_age_days: float | None, max_media_bytes: int | None) -> PruneReport:
        """See :meth:`Upkeep.prune`."""
        return await retention.prune(self.database, self.paths, now=self._clock(), me=self.owner_id,
                                     max_age_days=max_age_days, max_media_bytes=max_media_bytes)

    async def forget(self, conversation_id: str) -> bool:
        """See :meth:`Upkeep.forget`.

        Raises:
            StorageError: a live process is running a turn in it, or the database is unusable.
        """
        return await retention.forget(self.database, self.paths, conversation_id, now=self._clock(), me=self.owner_id)
