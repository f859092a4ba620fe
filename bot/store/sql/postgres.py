"""The conversation store on PostgreSQL (``[storage] database_url``), for several bot processes
on one database (issue 11, "Scale out").

Same :class:`bot.store.protocol.ConversationStore` as :class:`bot.store.sqlite.SQLiteStore`, same
rules (conversations, turns and resources as in the SQLite module's docstring; owners, leases,
retention and the media quota as in :mod:`bot.store.lease` and :mod:`bot.store.retention`),
written with SQLAlchemy Core over asyncpg. Media files stay in a directory every process shares
(:class:`bot.store.media.MediaStore`; paths are recorded relative to the data directory, so every
process must mount it at the same path or set the same ``data_dir``).

Concurrency is the server's: a turn's index and a resource's number are taken while holding the
conversation's row lock (``SELECT ... FOR UPDATE``), deliveries are claimed with a unique key
(``INSERT ... ON CONFLICT DO NOTHING``), per-user run slots under an advisory transaction lock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, func, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert

from pipeline.errors import HuggingGPTError
from pipeline.types import MODALITIES, Modality, Resource, ResourceSink, RunRecord, Turn

from ...errors import StorageError
from ...incoming import ConversationKey
from ...tokens import count_json_tokens, count_tokens
from ..chatlog import select_history, turn_views
from ..lease import RECENT_SECONDS, new_owner_id
from .. import handover, lease
from ..listing import Order, Origin, StoredFile
from ..protocol import MediaWriter, TurnSink
from ..text import clip_summary, valid_utf8
from . import upkeep
from .database import SQLDatabase
from .retention import SQLLedger, SQLRetention
from .schema import conversations as C, deliveries as D, feedback as F, resources as R, turn_records as TR, turns as T

log = logging.getLogger(__name__)

_RES = (R.c.id, R.c.kind, R.c.path, R.c.mime, R.c.size, R.c.origin, R.c.description, R.c.turn, R.c.name)
_CONTEXT = (  # the chat log's two queries, built once (the hot path of every turn)
    select(T.c.idx, T.c.user_text, T.c.summary, T.c.status, T.c.tokens)
    .where(T.c.conversation_id == bindparam("cid"), T.c.status != "running").order_by(T.c.idx.desc()),
    select(*_RES, R.c.tokens).where(R.c.conversation_id == bindparam("cid")).order_by(R.c.n),
)


def _gone(where: str, what: str, name: str) -> StorageError:
    return StorageError("This conversation no longer exists; start a new thread.", f"{where}: unknown {what} in {name}")


class PostgresStore(SQLRetention):
    """:class:`ConversationStore` on a PostgreSQL database plus a shared media directory.

    Args:
        url: ``[storage] database_url``.
        data_dir: the data directory (media files live under it; shared by every process).
        media: the media store (:class:`bot.store.media.MediaStore`) or anything with its ``put``.
        clock: current time in epoch seconds (tests move time with it).
        max_media_bytes, max_age_days: ``[storage]`` limits (as :class:`SQLiteStore`).
        upgrade: apply pending migrations at :meth:`open` (``False``: refuse a database that
            needs them; ``hugginggpt db upgrade`` applies them).
        connect_timeout: seconds to wait for the server.
    """

    def __init__(
        self, url: str, data_dir: Path, media: MediaWriter, *, clock: Callable[[], float] = time.time,
        max_media_bytes: int | None = None, max_age_days: float | None = None, upgrade: bool = True,
        connect_timeout: float = 10.0,
    ) -> None:
        self.database = SQLDatabase(url, connect_timeout=connect_timeout)
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.path = self.database.name
        self.media = media
        self._clock = clock
        self.limits = (max_media_bytes, max_age_days)
        self.upgrade = upgrade
        self.owner_id: str | None = None
        self.on_interrupted: Callable[[list[tuple[ConversationKey, int]]], Any] | None = None
        self.on_orphaned_deliveries: Callable[[list[tuple[str, str]]], Any] | None = None
        self.adopt_prefix = ""  # only deliveries whose key starts with it are taken over
        self._heartbeat: asyncio.Task[None] | None = None

    # -- life cycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, migrate (or refuse, see ``upgrade``), register this process as an owner with
        its heartbeat, and become the media store's ledger (the quota at write time).

        Raises:
            StorageError: wrong URL or credentials, unreachable, read-only, newer schema, or
                pending migrations with ``upgrade=False``; nothing is written then.
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
            self.media.ledger = SQLLedger(self)  # type: ignore[attr-defined]

    async def close(self) -> None:
        """Stop the heartbeat, mark this process's running turns interrupted, release its pins and
        run slots, remove its owner row, close the pool; safe to call twice."""
        if getattr(getattr(self.media, "ledger", None), "store", None) is self:
            self.media.ledger = None  # type: ignore[attr-defined]
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        owner, self.owner_id = self.owner_id, None
        if owner is not None and self.database.engine is not None:
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
        if not marked:
            return
        log.warning("%s: marked %d turn(s) of gone processes as interrupted", self.path, len(marked))
        await handover.tell_interrupted(self.find, self.on_interrupted, marked)

    def _me(self) -> str:
        if self.owner_id is None:
            raise StorageError(f"The conversation database {self.path} is not open.")
        return self.owner_id

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- conversations ---------------------------------------------------------------------------

    async def get_or_create(self, key: ConversationKey) -> str:
        """See :meth:`ConversationStore.get_or_create` (an idle conversation looked up counts as used)."""
        skey = key.as_string()
        rows = await self.database.read("looking up a conversation", select(C.c.id, C.c.updated).where(C.c.key == skey))
        if rows and rows[0][1] >= self._clock() - RECENT_SECONDS / 2:
            return rows[0][0]
        async with self.database.tx("looking up a conversation") as conn:
            now = self._clock()
            row = (await conn.execute(update(C).where(C.c.key == skey).values(updated=func.greatest(C.c.updated, now))
                                      .returning(C.c.id))).first()
            if row:
                return row[0]
            while True:
                cid = secrets.token_hex(5)
                row = (await conn.execute(
                    insert(C).values(id=cid, key=skey, created=now, platform=key.platform, workspace=key.workspace,
                                     channel=key.channel, thread=key.thread, updated=now)
                    .on_conflict_do_nothing().returning(C.c.id))).first()
                if row:
                    return cid
                row = (await conn.execute(select(C.c.id).where(C.c.key == skey))).first()
                if row:  # another process created it meanwhile
                    return row[0]

    async def find(self, conversation_id: str) -> ConversationKey | None:
        """See :meth:`ConversationStore.find`."""
        rows = await self.database.read("looking up a conversation", select(
            C.c.platform, C.c.workspace, C.c.channel, C.c.thread).where(C.c.id == conversation_id))
        return ConversationKey(*rows[0]) if rows else None

    async def retire(self, key: ConversationKey) -> str | None:
        """See :meth:`ConversationStore.retire`."""
        async with self.database.tx("starting a new conversation") as conn:
            row = (await conn.execute(update(C).where(C.c.key == key.as_string())
                                      .values(key=C.c.key + "#retired-" + C.c.id).returning(C.c.id))).first()
        return row[0] if row else None

    async def record_feedback(self, conversation_id: str, turn: int, user: str, verdict: str) -> bool:
        """See :meth:`ConversationStore.record_feedback`."""
        async with self.database.tx("storing feedback") as conn:
            if (await conn.execute(select(T.c.idx).where(T.c.conversation_id == conversation_id, T.c.idx == turn))).first() is None:
                return False
            now = self._clock()
            await conn.execute(insert(F).values(conversation_id=conversation_id, idx=turn, user=user, verdict=verdict, at=now)
                               .on_conflict_do_update(index_elements=[F.c.conversation_id, F.c.idx, F.c.user],
                                                      set_={"verdict": verdict, "at": now}))
        return True

    async def claim_delivery(self, keys: Sequence[str], payload: str | None = None) -> bool:
        """See :meth:`ConversationStore.claim_delivery` (a unique key per delivery)."""
        try:
            async with self.database.tx("recording a delivery") as conn:
                return await upkeep.claim(conn, list(keys), now=self._clock(), owner=self._me(), payload=payload)
        except upkeep._Taken:
            return False

    async def note_delivery(self, key: str, payload: str) -> None:
        """See :meth:`ConversationStore.note_delivery`."""
        async with self.database.tx("noting a delivery") as conn:
            await conn.execute(update(D).where(D.c.key == key, D.c.payload.is_not(None)).values(payload=payload))

    async def settle_delivery(self, key: str) -> None:
        """See :meth:`ConversationStore.settle_delivery`."""
        async with self.database.tx("settling a delivery") as conn:
            await conn.execute(update(D).where(D.c.key == key, D.c.payload.is_not(None)).values(payload=None))

    async def adopt_deliveries(self) -> list[tuple[str, str]]:
        """Take the unsettled deliveries of gone processes and pass them to
        :attr:`on_orphaned_deliveries`; ``[(key, payload)]``."""
        if self.on_orphaned_deliveries is None:
            return []
        async with self.database.tx("taking over deliveries") as conn:
            adopted = await upkeep.adopt(conn, me=self._me(), prefix=self.adopt_prefix)
        await handover.run_adopted(self.path, self.on_orphaned_deliveries, adopted)
        return adopted

    # -- turns -------------------------------------------------------------------------------------

    async def begin_turn(self, conversation_id: str, user_text: str, user: str | None, delivery: str | None = None) -> int:
        """See :meth:`ConversationStore.begin_turn` (the index is taken under the conversation's row lock)."""
        now, me = self._clock(), self._me()
        user_text = valid_utf8(user_text)
        user = valid_utf8(user) if user is not None else None
        async with self.database.tx("starting a turn") as conn:
            row = (await conn.execute(update(C).where(C.c.id == conversation_id).values(updated=now).returning(C.c.id))).first()
            if row is None:
                raise _gone("begin_turn", f"conversation {conversation_id!r}", self.path)
            idx = (await conn.execute(select(func.coalesce(func.max(T.c.idx) + 1, 0))
                                      .where(T.c.conversation_id == conversation_id))).scalar()
            await conn.execute(T.insert().values(conversation_id=conversation_id, idx=idx, user_text=user_text,
                                                 status="running", created=now, user=user,
                                                 tokens=count_tokens(user_text), owner=me))
            if delivery is not None:
                await conn.execute(update(D).where(D.c.key == delivery).values(payload=None))
        return int(idx)

    async def finish_turn(self, conversation_id: str, turn: int, record: RunRecord) -> None:
        """See :meth:`ConversationStore.finish_turn`."""
        doc = valid_utf8(json.dumps(record.to_json(), ensure_ascii=False, default=str))
        summary = valid_utf8(clip_summary(record.response or (record.error or "")))
        response, error = valid_utf8(record.response), valid_utf8(record.error) if record.error is not None else None
        now = self._clock()
        async with self.database.tx("saving a turn") as conn:
            row = (await conn.execute(select(T.c.user_text).where(T.c.conversation_id == conversation_id, T.c.idx == turn))).first()
            if row is None:
                raise _gone("finish_turn", f"turn {conversation_id!r}/{turn}", self.path)
            await conn.execute(update(T).where(T.c.conversation_id == conversation_id, T.c.idx == turn).values(
                summary=summary, tokens=count_tokens(row[0]) + count_tokens(summary), status=record.status,
                error=error, finished=now))
            await conn.execute(insert(TR).values(conversation_id=conversation_id, idx=turn, answer=response, record=doc)
                               .on_conflict_do_update(index_elements=[TR.c.conversation_id, TR.c.idx],
                                                      set_={"answer": response, "record": doc}))
            await conn.execute(update(C).where(C.c.id == conversation_id).values(updated=now))

    async def wait_turn(self, conversation_id: str, turn: int, *, poll: float = 0.2) -> bool:
        """See :meth:`ConversationStore.wait_turn`."""
        waited = False
        earlier = select(T.c.idx).where(T.c.conversation_id == conversation_id, T.c.idx < turn,
                                        T.c.status == "running").limit(1)
        while await self.database.read("waiting for the thread's earlier turn", earlier):
            waited = True
            await asyncio.sleep(poll)
        return waited

    async def mark_interrupted(self) -> int:
        """See :meth:`ConversationStore.mark_interrupted` (the threads are told through
        :attr:`on_interrupted`)."""
        async with self.database.tx("marking interrupted turns") as conn:
            marked = await upkeep.mark_orphans(conn, now=self._clock(), me=self.owner_id)
        await self._tell(marked)
        return len(marked)

    async def turns(self, conversation_id: str) -> list[dict[str, Any]]:
        """See :meth:`ConversationStore.turns`."""
        stmt = (select(T.c.idx, T.c.user, T.c.user_text, func.coalesce(TR.c.answer, ""), T.c.summary, T.c.status,
                       T.c.error, T.c.created, T.c.finished, TR.c.record)
                .select_from(T.outerjoin(TR, (TR.c.conversation_id == T.c.conversation_id) & (TR.c.idx == T.c.idx)))
                .where(T.c.conversation_id == conversation_id).order_by(T.c.idx))
        rows = await self.database.read("reading turns", stmt)
        return turn_views([tuple(r) for r in rows], await self.resources(conversation_id))

    # -- resources ---------------------------------------------------------------------------------

    def _abs(self, stored: str) -> Path:
        p = Path(stored)
        return p if p.is_absolute() else self.data_dir / p

    def _rel(self, path: Path) -> str:
        try:
            return str(Path(path).resolve().relative_to(self.data_dir))
        except ValueError:
            return str(Path(path).resolve())

    def _resource(self, row: Sequence[Any]) -> Resource:
        rid, kind, path, mime, size, origin, description, turn, name = row
        return Resource(rid, kind, self._abs(path), mime, int(size), origin, description, turn, name)

    async def add_resource(
        self, conversation_id: str, turn: int, data: bytes, *, kind: Modality, mime: str, origin: str,
        description: str, name: str | None = None,
    ) -> Resource:
        """See :meth:`ConversationStore.add_resource` (``image-1``, ``audio-1``, ``image-2``...)."""
        if kind not in MODALITIES:
            raise ValueError(f"unknown resource kind {kind!r}")
        description = valid_utf8(" ".join(description.split()))
        name = valid_utf8(name) if name is not None else None
        if not await self.database.read("saving a file", select(C.c.id).where(C.c.id == conversation_id)):
            raise _gone("add_resource", f"conversation {conversation_id!r}", self.path)
        try:
            path = await self.media.put(data, mime)
        except HuggingGPTError:
            raise
        except OSError as e:
            raise StorageError(f"The media directory under {self.data_dir} cannot be written ({e.strerror}).") from None
        rel, now = self._rel(Path(path)), self._clock()
        async with self.database.tx("saving a file") as conn:
            if (await conn.execute(select(C.c.id).where(C.c.id == conversation_id).with_for_update())).first() is None:
                raise _gone("add_resource", f"conversation {conversation_id!r}", self.path)
            seq, n = (await conn.execute(
                select(func.coalesce(func.max(R.c.seq).filter(R.c.kind == kind), 0) + 1,
                       func.coalesce(func.max(R.c.n), 0) + 1).where(R.c.conversation_id == conversation_id))).one()
            res = Resource(f"{kind}-{seq}", kind, self._abs(rel), mime, len(data), origin, description, turn, name)
            await conn.execute(R.insert().values(
                conversation_id=conversation_id, n=n, id=res.id, kind=kind, path=rel, mime=mime, size=res.size,
                origin=origin, description=description, turn=turn, seq=seq, name=name,
                tokens=count_json_tokens(res.prompt_view()), created=now))
            await self._record_media(conn, rel, res.size, now)
        return res

    def sink(self, conversation_id: str, turn: int) -> ResourceSink:
        """See :meth:`ConversationStore.sink`."""
        return TurnSink(self, conversation_id, turn)

    async def resources(self, conversation_id: str) -> list[Resource]:
        """See :meth:`ConversationStore.resources`."""
        rows = await self.database.read("reading resources", select(*_RES).where(R.c.conversation_id == conversation_id)
                                        .order_by(R.c.n))
        return [self._resource(r) for r in rows]

    async def files_of(self, platform: str, workspace: str, *, limit: int, order: Order = "desc",
                       after: tuple[str, str] | None = None, origin: Origin | None = None,
                       only: tuple[str, str] | None = None) -> list[StoredFile]:
        """See :meth:`ConversationStore.files_of` (keyset pagination, :mod:`bot.store.listing`)."""
        key = tuple_(R.c.created, R.c.conversation_id, R.c.n)
        q = (select(R.c.conversation_id, *_RES, R.c.created).join(C, C.c.id == R.c.conversation_id)
             .where(C.c.platform == platform, C.c.workspace == workspace))
        if origin is not None:
            q = q.where(R.c.origin == "user") if origin == "user" else q.where(R.c.origin != "user")
        if only is not None:
            q = q.where(R.c.conversation_id == only[0], R.c.id == only[1])
        if after is not None:
            found = await self.database.read("listing files", select(R.c.created, R.c.conversation_id, R.c.n)
                                             .where(R.c.conversation_id == after[0], R.c.id == after[1]))
            if not found:
                return []
            mark = tuple_(*found[0])
            q = q.where(key < mark if order == "desc" else key > mark)
        cols = (R.c.created, R.c.conversation_id, R.c.n)
        q = q.order_by(*(c.desc() if order == "desc" else c.asc() for c in cols)).limit(limit)
        rows = await self.database.read("listing files", q)
        return [StoredFile(r[0], self._resource(r[1:10]), float(r[10])) for r in rows]

    async def context(self, conversation_id: str, budget_tokens: int) -> tuple[list[Turn], list[Resource]]:
        """See :meth:`ConversationStore.context` (paper §3.1; both queries on one connection)."""
        turn_rows, res_rows = await self.database.read("loading the chat log", *_CONTEXT,
                                                       params={"cid": conversation_id})
        with_tokens = [(self._resource(row[:-1]), row[-1]) for row in res_rows]
        return select_history([tuple(r) for r in turn_rows], with_tokens, budget_tokens), [r for r, _ in with_tokens]

    # -- shared limits -------------------------------------------------------------------------------

    async def take_rate(self, key: str, limit: int, period: float) -> float:
        """See :meth:`ConversationStore.take_rate`."""
        if limit <= 0:
            return 0.0
        async with self.database.tx("counting a request") as conn:
            return await upkeep.take_rate(conn, key, limit=limit, period=period, now=self._clock())

    async def take_slot(self, key: str, limit: int) -> str | None:
        """See :meth:`ConversationStore.take_slot`."""
        slot = secrets.token_hex(8)
        async with self.database.tx("reserving a run slot") as conn:
            ok = await upkeep.take_slot(conn, key, slot, limit=limit, owner=self._me(), now=self._clock())
        return slot if ok else None

    async def release_slot(self, slot: str) -> None:
        """See :meth:`ConversationStore.release_slot`."""
        from .schema import run_slots as S

        async with self.database.tx("releasing a run slot") as conn:
            await conn.execute(S.delete().where(S.c.id == slot))
