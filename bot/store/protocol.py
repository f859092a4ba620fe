"""The interfaces to conversation storage, split by what their callers need, and what the store
needs from the media store.

* :class:`Conversations`: conversations and turns with their resources and chat log (the service,
  the terminal and the HTTP API);
* :class:`Deliveries`: platform deliveries taken once across processes (the Slack and Discord
  front ends, through the service);
* :class:`SharedLimits`: rate budgets and run slots shared by every process (admission);
* :class:`ExpertRegistry`: expert servers registered by ``hugginggpt experts launch``;
* :class:`Upkeep`: opening and closing, leases and retention (start-up, ``hugginggpt store``).

:class:`ConversationStore` is all four: what :func:`bot.store.open_store` returns.
:class:`bot.store.sql.store.SQLStore` implements it, on SQLite and PostgreSQL. Every method raises
:class:`StorageError` (one sentence naming the store) when the storage is unusable; none raises a
driver exception. Interrupted turns and deliveries taken over reach the front ends through
:class:`bot.store.handover.Handover`, not through the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Protocol

from pipeline.catalog.servers import RegisteredServer
from pipeline.types import Modality, Resource, ResourceSink, RunRecord, Turn

from ..incoming import ConversationKey
from ..stored import Limit, Order, Origin, Overspent, Payer, Scope, Settled, SpendRow, StoredFile


class MediaWriter(Protocol):
    """What the store needs from the media store (:class:`bot.store.media.MediaStore`)."""

    async def put(self, data: bytes, mime: str) -> Path:  # pragma: no cover - protocol
        """Store ``data`` atomically under a content-hash name; return its absolute path."""
        ...


@dataclass(frozen=True)
class PruneReport:
    """What :meth:`Upkeep.prune` removed.

    Attributes:
        conversations: conversations deleted (with their turns and resource rows).
        files: media files deleted from disk.
        bytes_freed: bytes of those files (sizes as recorded when stored).
        media_bytes: bytes of the recorded media files left (what the quota counts).
    """

    conversations: int = 0
    files: int = 0
    bytes_freed: int = 0
    media_bytes: int = 0


class TurnSink:
    """:class:`ResourceSink` bound to one turn of one conversation of a :class:`Conversations` store:
    ``add`` calls ``store.add_resource(conversation_id, turn, ...)``."""

    def __init__(self, store: Conversations, conversation_id: str, turn: int) -> None:
        self._store, self.conversation_id, self.turn = store, conversation_id, turn

    async def add(
        self, data: bytes, *, kind: Modality, mime: str, origin: str, description: str, name: str | None = None
    ) -> Resource:
        """Store ``data`` as a resource of the bound turn (see ``add_resource``)."""
        return await self._store.add_resource(
            self.conversation_id, self.turn, data, kind=kind, mime=mime, origin=origin,
            description=description, name=name,
        )


class Conversations(Protocol):
    """Conversations and turns with their resources and chat log."""

    async def get_or_create(self, key: ConversationKey) -> str:
        """Return the short stable id of the conversation for ``key``, creating it if new."""
        ...

    async def find(self, conversation_id: str) -> ConversationKey | None:
        """Return the key of a conversation id, or ``None`` if unknown."""
        ...

    async def retire(self, key: ConversationKey) -> str | None:
        """Detach ``key`` from its conversation so its next use starts a new one (the old one is
        kept); the retired id, or ``None``."""
        ...

    async def record_feedback(self, conversation_id: str, turn: int, user: str, verdict: str) -> bool:
        """Store ``user``'s ``verdict`` (``"good"``/``"bad"``) on a turn, replacing an earlier one;
        ``False`` when the turn does not exist."""
        ...

    async def begin_turn(self, conversation_id: str, user_text: str, user: str | None, delivery: str | None = None) -> int:
        """Record a new turn with status ``"running"``; return its 0-based index. ``delivery``:
        the key of the platform delivery this turn answers, settled in the same transaction (so
        a crash leaves either an interrupted turn or a delivery to run again, never both)."""
        ...

    async def wait_turn(self, conversation_id: str, turn: int, *, poll: float = 0.2) -> bool:
        """Wait until no earlier turn of the conversation is running, in any process sharing the
        store (a thread's turns run in the order they began; interrupted turns stop counting when
        their process's lease expires); ``True`` when it had to wait. ``poll``: seconds."""
        ...

    async def add_resource(
        self,
        conversation_id: str,
        turn: int,
        data: bytes,
        *,
        kind: Modality,
        mime: str,
        origin: str,
        description: str,
        name: str | None = None,
    ) -> Resource:
        """Store ``data`` in the media store and register it as a resource with a fresh id."""
        ...

    def sink(self, conversation_id: str, turn: int) -> ResourceSink:
        """A :class:`ResourceSink` that adds generated files to ``turn`` of the conversation."""
        ...

    async def resources(self, conversation_id: str) -> list[Resource]:
        """All resources of the conversation, oldest first."""
        ...

    async def files_of(
        self, platform: str, workspace: str, *, limit: int, order: Order = "desc",
        after: tuple[str, str] | None = None, origin: Origin | None = None, only: tuple[str, str] | None = None,
    ) -> list[StoredFile]:
        """The files of every conversation of ``platform`` + ``workspace`` (an API key's, say).

        Args:
            platform, workspace: whose conversations (:class:`ConversationKey` fields).
            limit: at most this many files.
            order: ``"desc"`` newest first, ``"asc"`` oldest first (by the time they were stored).
            after: ``(conversation id, resource id)`` of the last file of the previous page: only
                files after it in ``order``; an unknown one gives an empty list.
            origin: ``"user"`` (sent by users) or ``"task"`` (generated) only; ``None``: both.
            only: ``(conversation id, resource id)``: that one file, if it is one of theirs.

        Returns:
            :class:`bot.stored.StoredFile` objects in ``order``.
        """
        ...

    async def finish_turn(self, conversation_id: str, turn: int, record: RunRecord) -> None:
        """Store the run's record (plan, selections, results, answer, files, timings, status)."""
        ...

    async def context(self, conversation_id: str, budget_tokens: int) -> tuple[list[Turn], list[Resource]]:
        """Chat-log context: earlier finished turns newest first within the budget; all resources."""
        ...

    async def turns(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every turn of the conversation, oldest first, as JSON-able dicts (display/resume)."""
        ...


class Deliveries(Protocol):
    """Platform deliveries (events, messages, interactions) taken by one process of those sharing
    the store, kept until their turn begins so another process can run them if this one dies."""

    async def claim_delivery(self, keys: Sequence[str], payload: str | None = None) -> bool:
        """Take a platform delivery known by any of ``keys`` for this process: ``True`` when no
        process sharing the store took one of them before (then all are recorded, atomically).

        ``payload`` (the event, as text) is kept with ``keys[0]`` until the delivery is settled
        (:meth:`settle_delivery`, or :meth:`begin_turn` with ``delivery``): if this process dies
        before that, another one receives it through :class:`bot.store.handover.Handover`."""
        ...

    async def note_delivery(self, key: str, payload: str) -> None:
        """Replace the kept payload of a delivery not settled yet (what a process that takes it
        over needs to know, e.g. the status message already posted); nothing if settled."""
        ...

    async def settle_delivery(self, key: str) -> None:
        """Drop the payload of a delivery this process handled (answered, refused or ignored)."""
        ...


class SharedLimits(Protocol):
    """Admission budgets shared by every process on the store."""

    async def take_rate(self, key: str, limit: int, period: float) -> float:
        """Count one request of ``key`` (a user) against ``limit`` per ``period`` seconds, shared by
        every process: ``0.0`` when allowed (and counted), else seconds until one more fits."""
        ...

    async def take_slot(self, key: str, limit: int) -> str | None:
        """Reserve one of ``key``'s ``limit`` run slots shared by every process; the slot id, or
        ``None`` when all are held (slots of gone processes do not count)."""
        ...

    async def release_slot(self, slot: str) -> None:
        """Give back a slot :meth:`take_slot` returned."""
        ...


class Approvals(Protocol):
    """Plans waiting for a person to approve them (:mod:`bot.approval`), shared by every process."""

    async def save_plan(self, plan_id: str, requester: str, payload: str, expires: float) -> None:
        """Keep a plan (``payload``: its JSON) asked by ``requester`` until ``expires`` (epoch seconds)."""
        ...

    async def pending_plan(self, plan_id: str) -> tuple[str, str, float] | None:
        """``(requester, payload, expires)`` of a kept plan; ``None`` when run, cancelled or unknown."""
        ...

    async def take_plan(self, plan_id: str) -> bool:
        """Remove a kept plan; ``True`` only for the one caller that removed it (of two presses, one runs it)."""
        ...


class Spending(Protocol):
    """What runs cost, shared by every process on the store (:mod:`bot.budgets`)."""

    async def reserve_spend(self, spend_id: str, payer: Payer, usd: float, limits: Sequence[Limit]) -> Overspent | None:
        """Reserve ``usd`` (US dollars) more for the run ``spend_id`` (its row made at the first
        call), atomically across processes, unless a budget of ``limits`` is spent already or
        would be passed: ``None`` when reserved, else the budget refused."""
        ...

    async def check_spend(self, payer: Payer, limits: Sequence[Limit]) -> Overspent | None:
        """The first budget of ``limits`` that ``payer`` has spent already (what its period
        counts is at the budget), or ``None``; a read, reserving nothing."""
        ...

    async def settle_spends(self, rows: Sequence[Settled]) -> None:
        """Record runs' estimates and actual costs (:class:`bot.stored.Settled`), in one
        transaction; a run's known cost then counts against budgets instead of its reservation."""
        ...

    async def spend_report(self, scope: Scope, since: float, until: float) -> list[SpendRow]:
        """Per user, channel or team (``scope``): the runs begun in ``[since, until)`` epoch
        seconds and what they cost."""
        ...


class ExpertRegistry(Protocol):
    """The expert servers ``hugginggpt experts launch`` registered, shared by every process
    (:mod:`bot.store.sql.experts`)."""

    async def live_experts(self) -> list[RegisteredServer]:
        """The records not expired now, newest first (a bounded, indexed read)."""
        ...


class Upkeep(Protocol):
    """Opening and closing the store, process leases (turns of gone processes are marked interrupted
    and published on :class:`bot.store.handover.Handover`) and retention."""

    async def open(self) -> None:
        """Open (create or migrate) the store."""
        ...

    async def close(self) -> None:
        """Close the store; idempotent."""
        ...

    async def mark_interrupted(self) -> int:
        """Mark turns left ``"running"`` by a process that is gone (no live lease) as failed;
        return how many. Turns of live processes are left alone."""
        ...

    async def prune(self, *, max_age_days: float | None, max_media_bytes: int | None) -> PruneReport:
        """Apply the retention limits (days, bytes), least recently used first; running and
        recently used conversations and files are kept."""
        ...

    async def forget(self, conversation_id: str) -> bool:
        """Delete a conversation and its media not shared with another; ``False`` if unknown."""
        ...


class ConversationStore(Conversations, Deliveries, SharedLimits, Approvals, Spending, ExpertRegistry, Upkeep, Protocol):
    """The whole store (what :func:`bot.store.open_store` returns): give each caller only the
    part it needs."""
