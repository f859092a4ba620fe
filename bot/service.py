"""The service every front end talks to: checks and stores user files, keeps conversations,
builds the pipeline from settings, and runs requests.

Front ends (``adapters/``) call :meth:`Service.handle` once per turn with one
:class:`bot.incoming.Message` and render the events it yields; admission, the file checks, document
expansion and the delivery's claim and settle happen inside. They never decide anything about
tasks or models, and never reach the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import replace
from collections.abc import AsyncIterator, Sequence

from pipeline import tracing
from pipeline.core import Pipeline
from pipeline.cost import Cost
from pipeline.coverage import readable_kinds
from pipeline.experts.http import BILL_TO
from pipeline.followup import work_summary
from pipeline.run import PlanGate
from pipeline.types import Done, Event, Notice, Request, Resource, ResourceSink, ResponseDelta, RunRecord, Task, Turn

from .backends import RegisteredExperts, build_pipeline, start_first_use_imports
from .budgets import Budgets, Charge, cost_footer
from .degraded import (KeepOrFail, ScratchSpace, ToldThreads, UnsavedTurns, lost_context_sentence,
                       unsaved_sentence, without_memory_sentence)
from .documents import expand_documents
from .errors import InputError, Refused, StorageError
from .admission import Admission
from .approval import (CANCELLED, GONE, ApprovalNeeded, PendingPlan, PendingPlans, drop_steps, dropped_sentence,
                       needs_approval, new_plan_id)
from .incoming import Accepted, ConversationKey, Delivery, IncomingFile, Message, Requester
from .limits import check_request_size, too_many_files
from .locks import ThreadLocks
from .metrics import degraded_turn, store_error
from .mentions import check_mentions
from .readiness import Readiness
from .settings import Settings
from .store import ConversationStore, Handover, LocalResourceSink, MediaStore, open_store
from .store.deferred import DeferredLedger
from .stored import Order, Origin, StoredConversation, StoredFile
from .uploads import Inspected, inspect_upload


log = logging.getLogger(__name__)


class Service:
    """The service front ends talk to (see the module docstring). Build with :meth:`create`.

    Conversations (``key`` given): the user's files and every generated file become resources of
    the conversation with stable ids; the planning and response prompts see the chat log (earlier
    turns, newest first, within ``[storage] context_tokens``); each turn is stored with its plan,
    model choices, results, answer, files, timings and status. Two turns of one conversation run
    in order; different conversations never wait for each other.

    Attributes:
        store: the conversation store (``None`` when built without conversations).
        events: the channel on which the store publishes what it finds of gone processes sharing
            it (turns marked interrupted, deliveries taken over); front ends subscribe to it
            (:class:`bot.store.Handover`: ``events.on_interrupted(listener)``,
            ``events.on_redelivery(prefix, listener)``).
    """

    def __init__(
        self, settings: Settings, pipeline: Pipeline, media: MediaStore, store: ConversationStore | None,
        closers: Sequence, events: Handover | None = None,
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.media = media
        self.store = store
        self.events = events or Handover()
        self._closers = list(closers)
        self._locks = ThreadLocks()
        self._inflight: set[asyncio.Task] = set()
        self._told = ToldThreads()  # threads told that their turns are answered without the store
        self._unsaved = UnsavedTurns()
        self._scratch = ScratchSpace()
        self._admissions = {platform: Admission(settings, platform, store) for platform in ("discord", "slack")}
        self.plans = PendingPlans(store, settings.planning)  # plans waiting for approval (bot.approval)
        self._budgets = Budgets(settings.budgets, store)

    @classmethod
    async def create(cls, settings: Settings, *, conversations: bool = True) -> "Service":
        """Build the controller client, catalog, experts and stores from ``settings``.

        Args:
            settings: the settings.
            conversations: open the conversation store (``False``: requests without a
                conversation key only, as ``hugginggpt run``: the store is then opened in the
                background, only to record media files and keep the media quota,
                :class:`bot.store.deferred.DeferredLedger`).

        Raises:
            ConfigError: a credential is missing or the catalog file is unusable.
            StorageError: the conversation database is corrupt, locked or not writable.
        """
        registry = RegisteredExperts()  # the expert servers `experts launch` registers, once the store opens
        pipeline, closers = build_pipeline(settings, registry)
        closers = [*closers, start_first_use_imports()]  # paid now, not in a user's first run
        media = MediaStore(settings.storage.data_dir)
        events = Handover()  # turns of gone processes found while opening wait there for a front end
        store = None
        if conversations:
            try:
                store = await open_store(settings.storage, media, events=events)
            except BaseException:
                for close in closers:
                    await close()
                raise
            closers = [*closers, store.close]
            registry.source = store.live_experts
        else:
            media.ledger = ledger = DeferredLedger(settings.storage, media)
            ledger.start()  # ready before a run's first file: off the path between two tasks
            registry.source = ledger.live_experts
            closers = [*closers, ledger.close]
            log.info("no conversation is kept by this command; the store under %s is opened only to record files",
                     settings.storage.data_dir)
        pipeline.refresh_served_tasks()  # Hub look-ups start now, not when the first request arrives
        return cls(settings, pipeline, media, store, [*closers, events.close], events)

    @property
    def conversations(self) -> ConversationStore:
        """The open conversation store.

        Raises:
            StorageError: the service was built without one.
        """
        if self.store is None:
            raise StorageError("This command keeps no conversations.", "Service built with conversations=False")
        return self.store

    async def close(self) -> None:
        """Cancel runs in flight (their turns are stored as failed: "interrupted") and close clients."""
        for t in list(self._inflight):
            t.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        await self._scratch.close()
        await self._budgets.close()  # the settled costs that wait, before the store closes
        for close in self._closers:
            try:
                await close()
            except Exception:  # pragma: no cover - best effort on shutdown
                log.exception("error while closing")

    async def check_files(self, files: Sequence[IncomingFile]) -> list[IncomingFile]:
        """Check user files without storing them.

        Returns:
            The same files, marked as checked: :meth:`handle` does not inspect them again.

        Raises:
            InputError: too many files, or one is empty, too large, undecodable, of an unsupported
                type or labelled as another kind than its content.
        """
        files = await expand_documents(files, self.settings.documents, self.pipeline.decoder)  # a PDF: its text and image-only pages
        infos = await self._inspect(files)
        return [replace(f, checked=info) for f, info in zip(files, infos)]

    async def _inspect(self, files: Sequence[IncomingFile]) -> list[Inspected]:
        limit = self.settings.storage.max_files
        if len(files) > limit:
            raise too_many_files(limit)
        return [
            f.checked or await inspect_upload(f.data, f.name, f.declared_mime, max_bytes=self.settings.storage.max_file_bytes,
                                              max_pixels=self.settings.inference.max_image_pixels,
                                              max_text_bytes=self.settings.storage.max_text_file_bytes,
                                              decoder=self.pipeline.decoder)
            for f in files
        ]

    async def readable_kinds(self) -> set[str]:
        """The kinds of file (``"image"``, ``"audio"``, ``"video"``, ``"text"``) some task served
        now reads (:func:`pipeline.coverage.readable_kinds` of the served tasks), for front ends
        that filter what users may attach; the first call may wait for the Hub."""
        return readable_kinds(await self.pipeline.served_tasks())

    async def conversation_id(self, key: ConversationKey) -> str:
        """The stored conversation id of ``key`` (created on first use)."""
        return await self.conversations.get_or_create(key)

    async def start_over(self, key: ConversationKey) -> bool:
        """The next turn of ``key`` starts a new conversation (a DM's "new"); the earlier one stays
        stored under its id (a turn still running in it finishes there). Returns whether there was one.

        Raises:
            StorageError: the conversation store fails.
        """
        return await self.conversations.retire(key) is not None

    async def _note_delivery(self, key: str, payload: str | None) -> None:
        """Replace what is kept with a delivery not started yet (``ConversationStore.note_delivery``);
        failures are logged only (the first payload stays)."""
        if payload is None or self.store is None:
            return
        try:
            await self.store.note_delivery(key, payload)
        except StorageError as e:
            log.warning("could not note delivery %s: %s", key, e)

    async def settle_delivery(self, key: str) -> None:
        """Forget the payload of a delivery handled without a turn (refused, ignored, failed
        before the run; a taken-over delivery that cannot be answered any more); see
        ``ConversationStore.settle_delivery``. Failures are logged only."""
        await self._settle_delivery(key)

    async def _settle_delivery(self, key: str) -> None:
        if self.store is None:
            return
        try:
            await self.store.settle_delivery(key)
        except StorageError as e:
            store_error("settle_delivery")
            log.warning("could not settle delivery %s: %s", key, e)

    async def _claim(self, delivery: Delivery) -> bool:
        """Whether this process is the first of those sharing the store to take ``delivery``
        (``ConversationStore.claim_delivery``; its payload is kept with the first key until its
        turn begins or it is settled). A store failure is logged and counts as taken here: the
        turn itself then says what is wrong with the store."""
        if self.store is None:
            return True
        try:
            first = await self.store.claim_delivery(list(delivery.keys),
                                                    delivery.payload() if delivery.payload is not None else None)
        except StorageError as e:
            store_error("claim_delivery")
            log.warning("could not record delivery %s: %s", delivery.keys[0], e)
            return True
        if not first:
            log.info("delivery %s already taken by another process (or an earlier delivery)", delivery.keys[0])
        return first

    async def record_feedback(self, conversation_id: str, turn: int, verdict: str, user: str) -> bool:
        """Store ``user``'s ``verdict`` (``"good"`` or ``"bad"``) on a stored turn; ``False`` when
        the turn no longer exists or the verdict is not one of those.

        Raises:
            StorageError: the conversation store fails.
        """
        if verdict not in ("good", "bad"):
            return False
        return await self.conversations.record_feedback(conversation_id, turn, user, verdict)

    # What front ends read of the store, and the budgets they share through it: they never hold
    # the store itself (docs/architecture.md). Each raises as the store does; none changes what
    # happens when storage fails (the chat bots' answers without memory are :meth:`handle`'s).

    async def find_conversation(self, conversation_id: str) -> ConversationKey | None:
        """The key of the stored conversation ``conversation_id`` (``str``, as :meth:`conversation_id`
        returned it), ``None`` when no conversation has that id.

        Raises:
            StorageError: the conversation store fails, or the service keeps no conversations.
        """
        return await self.conversations.find(conversation_id)

    async def stored_conversation(self, conversation_id: str) -> StoredConversation | None:
        """A stored conversation to resume (``hugginggpt chat --conversation``): its key, every turn
        and every file, oldest first (:class:`bot.stored.StoredConversation`); ``None`` when no
        conversation has that id.

        Raises:
            StorageError: the conversation store fails, or the service keeps no conversations.
        """
        key = await self.conversations.find(conversation_id)
        if key is None:
            return None
        return StoredConversation(key, await self.conversations.turns(conversation_id),
                                  await self.conversations.resources(conversation_id))

    async def conversation_files(self, conversation_id: str) -> list[Resource]:
        """Every file of a stored conversation (the users' and generated ones), oldest first; empty
        for an unknown id.

        Raises:
            StorageError: the conversation store fails, or the service keeps no conversations.
        """
        return await self.conversations.resources(conversation_id)

    async def files_of(
        self, platform: str, workspace: str, *, limit: int, order: Order = "desc",
        after: tuple[str, str] | None = None, origin: Origin | None = None, only: tuple[str, str] | None = None,
    ) -> list[StoredFile]:
        """The files of every conversation of ``platform`` + ``workspace`` (an API key's), a page of
        at most ``limit`` in ``order`` by the time they were stored; ``after``, ``origin`` and
        ``only`` as :meth:`bot.store.protocol.Conversations.files_of` (keyset pagination).

        Returns:
            :class:`bot.stored.StoredFile` objects (conversation id, resource, epoch seconds stored).

        Raises:
            StorageError: the conversation store fails, or the service keeps no conversations.
        """
        return await self.conversations.files_of(platform, workspace, limit=limit, order=order, after=after,
                                                 origin=origin, only=only)

    async def storage_problems(self, *, store_only: bool = False) -> list[str]:
        """What keeps this process's storage from taking work, one sentence each that names no path
        (empty: ready), for a readiness probe (:class:`bot.readiness.Readiness`): the data
        directory's free space (``[server] ready_min_free_bytes``), whether the conversation store
        answers a lookup (within :data:`bot.readiness.PROBE_TIMEOUT` seconds) and, on SQLite, its
        integrity (``PRAGMA quick_check``, at most once a minute).

        Args:
            store_only: only whether the store answers (the chat bots, which keep answering
                without memory when storage runs short, ``handle``'s ``storage_fallback``).

        Never raises :class:`StorageError`: a failing store is one of the sentences (and a log line).
        """
        return await self._readiness.problems(store_only=store_only)

    @functools.cached_property
    def _readiness(self) -> Readiness:
        return Readiness(self.settings, self.store)  # keeps the last integrity verdict between probes

    async def take_rate(self, key: str, limit: int, period: float) -> float:
        """Count one request of ``key`` (a caller) against ``limit`` requests per ``period`` seconds,
        a budget shared by every process on the store (GCRA; ``SharedLimits.take_rate``).

        Returns:
            ``0.0`` when allowed (and counted), else the seconds until one more fits.

        Raises:
            StorageError: the conversation store fails, or the service keeps no conversations.
        """
        return await self.conversations.take_rate(key, limit, period)

    async def take_slot(self, key: str, limit: int) -> str | None:
        """Reserve one of ``key``'s ``limit`` concurrent-run slots shared by every process on the
        store (slots of gone processes do not count; ``SharedLimits.take_slot``); the slot id to
        give to :meth:`release_slot`, or ``None`` when all are held.

        Raises:
            StorageError: the conversation store fails, or the service keeps no conversations.
        """
        return await self.conversations.take_slot(key, limit)

    async def release_slot(self, slot: str) -> None:
        """Give back a slot :meth:`take_slot` returned (``str``).

        Raises:
            StorageError: the conversation store fails (the slot's lease expires it anyway), or the
                service keeps no conversations.
        """
        await self.conversations.release_slot(slot)

    async def handle(self, message: Message) -> AsyncIterator[Event | Accepted]:
        """Answer one message: THE front door every front end calls, once per turn.

        In order: the platform delivery is claimed against the other processes sharing the store
        (another process took it: nothing is yielded); the requester is admitted (access lists,
        rate, concurrency: :class:`bot.admission.Admission`); :class:`Accepted` is yielded (the
        front end may open its progress display; the delivery's payload is kept again after it);
        the files are downloaded, counted, PDFs expanded into text and pages, each file inspected;
        then the turn runs (see the class docstring and ``pipeline.core.Pipeline.run``) and its
        events follow. The run slot is given back and the delivery settled when the message ends
        (a cancelled message leaves an unstarted delivery to another process).

        ``message.stop``: set it to stop the run; the answer covers what finished and the turn is
        stored with it (``record.stopped``). ``message.memoryless_fallback`` (the chat bots): when
        the conversation store fails as the turn starts, answer anyway without memory of the
        conversation (no stored history, this turn's files kept only for the answer,
        :mod:`bot.degraded`, nothing stored); an output that cannot be stored fails its task only;
        a failed save of the finished turn is logged and the answer still comes. The thread gets
        one :class:`Notice` saying so, once while the failure lasts. Without it (the HTTP API)
        every storage failure raises.

        Args:
            message: the request (:class:`bot.incoming.Message`).

        Yields:
            :class:`Accepted`, then the pipeline's events, the last one :class:`Done`.

        Raises:
            Refused: admission refused the requester (before :class:`Accepted`).
            InputError: before the first pipeline event: no text and no file, a request over
                ``[planning] max_request_chars``, too many files, one unusable, or the text names
                a resource id the conversation does not have (nothing is stored then).
            StorageError: before the first pipeline event, if the conversation store fails
                (without ``memoryless_fallback``; with it, only when a file of the user's cannot be
                kept at all); after the :class:`Done` event's record was made, if it cannot be saved
                (without ``memoryless_fallback``; :class:`Done` is then not yielded).

        With tracing on (``[telemetry] otlp_endpoint``, :mod:`pipeline.tracing`) the turn is one
        trace: a ``turn`` span naming the front end and the run's status, the stages' spans below it.
        """
        with tracing.span("turn", {"front_end": _front_end(message), **tracing.content(message.text or "")}) as turn:
            async with contextlib.aclosing(self._handle(message)) as events:
                async for event in events:
                    if isinstance(event, Done):
                        tracing.annotate(turn, {"status": event.record.status, "tasks": len(event.record.tasks),
                                                "deadline_passed": event.record.deadline_passed,
                                                "stopped": event.record.stopped})
                    yield event

    async def _handle(self, message: Message) -> AsyncIterator[Event | Accepted]:
        """What :meth:`handle` says, without its span."""
        delivery, who = message.delivery, message.who
        if delivery is not None and not delivery.claimed and not await self._claim(delivery):
            return
        admission: Admission | None = None
        cancelled = False
        try:
            admission = await self._admit(who)
            claimed_with = delivery.payload() if delivery is not None and delivery.payload is not None else None
            yield Accepted()
            if delivery is not None and delivery.payload is not None and delivery.payload() != claimed_with:
                await self._note_delivery(delivery.keys[0], delivery.payload())
            async for event in self._answer(message):
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        finally:
            if admission is not None and who is not None:
                admission.release(who)
            if delivery is not None and not cancelled:
                await self._settle_delivery(delivery.keys[0])

    async def _admit(self, who: Requester | None) -> Admission | None:
        """Admit ``who`` by its platform's rules; the admission holding its run slot (``None``:
        no rules apply). Raises Refused."""
        admission = self._admissions.get(who.platform) if who is not None else None
        if admission is None or who is None:
            return None
        refusal = await admission.admit(who)
        if refusal is not None:
            raise Refused(refusal.reason, refusal.sentence)
        return admission

    async def _answer(self, message: Message) -> AsyncIterator[Event]:
        """The admitted message's files read and checked, then its turn."""
        if message.approve is not None:  # a Run press: the kept plan's request, files and conversation
            message = await self._take_plan(message)
        text = (message.text or "").strip()
        check_request_size(text, self.settings.planning.max_request_chars)
        files = list(message.files)
        if message.download is not None and message.download.count:
            if message.download.count + len(files) > self.settings.storage.max_files:
                raise too_many_files(self.settings.storage.max_files)
            files += await message.download.fetch(self.settings.storage.max_file_bytes)
        if not text and not files:
            raise InputError("Please write a request (and attach files if it needs them).")
        text = text or "What can you tell me about these files?"
        files = await expand_documents(files, self.settings.documents, self.pipeline.decoder)  # a PDF: its text and image-only pages
        if callable(message.key):  # the front end shows the turn once its files passed (Discord: a thread, a status message)
            files = [replace(f, checked=info) for f, info in zip(files, await self._inspect(files))]
            message = replace(message, key=await message.key())
        if message.key is None:
            async for event in self._one_off(text, files, message):
                yield event
            return
        async with self._locks.lock(message.key.as_string()):  # taken first: a thread's turns keep their order of arrival
            infos = await self._inspect(files)
            async for event in self._conversation_turn(replace(message, text=text), list(zip(files, infos))):
                yield event

    async def _one_off(self, text: str, files: Sequence[IncomingFile], message: Message) -> AsyncIterator[Event]:
        """A request outside a conversation: its files in the media store, nothing else stored."""
        infos = await self._inspect(files)
        if message.approve is None:  # a kept plan's files are its own, checked when it was planned
            check_mentions(text, [], [i.kind for i in infos], None)
        sink = LocalResourceSink(self.media)
        stored = [
            await sink.add(f.data, kind=i.kind, mime=i.mime, origin="user", description=i.description, name=f.name)
            for f, i in zip(files, infos)
        ]
        if message.on_start is not None:
            message.on_start(None, 0)
        request = Request(text=text, files=stored, history=list(message.chat_log), context=message.context)
        async for event in self._run(request, sink, message):
            yield event

    async def _take_plan(self, message: Message) -> Message:
        """The message of a Run press, with the kept plan it runs (taken: a second press finds none).

        Raises:
            InputError, Refused: as :meth:`bot.approval.PendingPlans.find`; taken meanwhile (:data:`bot.approval.GONE`).
        """
        approve = message.approve
        assert approve is not None
        plan = await self.plans.find(approve.plan_id, message.who)
        if not await self.plans.take(plan.plan_id):
            raise InputError(GONE, f"plan {plan.plan_id} taken by another press")
        return replace(message, text=plan.text, files=(), download=None, key=plan.key, approve=replace(approve, kept=plan))

    async def cancel_plan(self, plan_id: str, who: Requester | None) -> str:
        """Cancel a plan kept for approval (a Cancel press); the sentence to show.

        Raises:
            InputError, Refused: as :meth:`bot.approval.PendingPlans.find`.
            StorageError: the store fails.
        """
        await self.plans.find(plan_id, who)
        return CANCELLED if await self.plans.take(plan_id) else GONE

    async def pending_plan(self, plan_id: str, who: Requester | None) -> PendingPlan:
        """The plan kept for approval under ``plan_id``, checked for ``who`` (a press on its buttons).

        Raises:
            InputError, Refused: as :meth:`bot.approval.PendingPlans.find`.
            StorageError: the store fails.
        """
        return await self.plans.find(plan_id, who)

    async def _run(self, request: Request, sink: ResourceSink, message: Message) -> AsyncIterator[Event]:
        """The pipeline's run of ``request``: a kept plan's (less its dropped steps, said in the
        answer), or one that may wait for approval (kept, then :class:`ApprovalNeeded` before
        ``Done``); charged to the requester (:mod:`bot.budgets`: a budget spent, or a plan that
        would pass one, ends it with a record whose error is the budget's sentence), its answer
        ending with its cost when ``[prices] show_cost`` is on; its expert calls billed to its
        team's own organisation where ``[inference] bill_to_teams`` names one."""
        approve, said = message.approve, ""
        if approve is not None and isinstance(approve.kept, PendingPlan):
            plan = approve.kept
            kept, removed = drop_steps(plan.tasks, approve.drop)
            files = list(plan.files) or [r for r in request.resources if r.id in plan.file_ids]
            request, said = replace(request, files=files, plan=kept), dropped_sentence(plan.tasks, removed)
        team = message.who.workspace if message.who is not None else None
        BILL_TO.set(self.settings.inference.bill_to_teams.get(team) if team else None)  # the run's tasks inherit it
        try:
            charge = await self._budgets.open(message.who)
        except Refused as e:
            yield Done(RunRecord(request.text, status="error", error=e.user_message, failure=e,
                                 conversation_id=request.conversation_id, turn=request.turn))
            return
        if said:
            yield Notice(said)
        gate = self._gate(charge, ask=request.plan is None)
        async with contextlib.aclosing(self.pipeline.run(request, sink, stop=message.stop, gate=gate)) as events:
            async for event in events:
                if isinstance(event, Done):
                    async for told in self._done(event.record, charge, request, message, said):
                        yield told
                yield event

    def _gate(self, charge: Charge | None, *, ask: bool) -> PlanGate | None:
        """The run's :data:`pipeline.run.PlanGate`: the first plan held for a person when the
        approval policy (``[planning] approve``, :func:`bot.approval.needs_approval`) asks and
        ``ask`` (not a plan already approved); every plan's estimate reserved against the
        requester's budgets. ``None`` when neither applies (tasks then start as they are planned)."""
        budget = charge.gate if charge is not None and charge.limits else None
        policy = self.settings.planning
        asking = [ask and policy.approve != "never"]
        if budget is None and not asking[0]:
            return None

        async def gate(tasks: tuple[Task, ...], estimate: Cost | None) -> bool:
            first, asking[0] = asking[0], False  # a re-planning round is not asked again
            if first and needs_approval(tasks, estimate.usd if estimate is not None else None, policy):
                return True
            if budget is not None:
                await budget(tasks, estimate)
            return False
        return gate

    async def _done(self, record: RunRecord, charge: Charge | None, request: Request, message: Message,
                    said: str) -> AsyncIterator[Event]:
        """What the service adds as a run ends: the plan kept for approval, the run's cost settled,
        the dropped steps and the cost footer at the end of the answer."""
        if record.status == "awaiting approval":
            yield await self._keep_plan(request, message, record)
        if charge is not None:
            self._budgets.settle(charge, record)
        footer = cost_footer(record) if self.settings.prices.show_cost and record.answered else ""
        for tail in (said, footer) if record.answered else ():
            if tail:
                record.response += "\n\n" + tail
                yield ResponseDelta("\n\n" + tail)
        if said and record.answered:
            record.notes.append(said)

    async def _keep_plan(self, request: Request, message: Message, record: RunRecord) -> ApprovalNeeded:
        """Keep a plan that waits for approval (:class:`bot.approval.PendingPlans`); its event.
        Raises StorageError."""
        key = message.key if isinstance(message.key, ConversationKey) else None
        who = message.who.user if message.who is not None else (key.workspace if key is not None else "")  # an API key's id
        usd = record.estimate.usd if record.estimate is not None else None
        plan = PendingPlan(new_plan_id(), tuple(record.tasks), usd, time.time() + self.settings.planning.approval_timeout,
                           who, request.text, tuple(f.id for f in request.files), key, tuple(request.files))
        await self.plans.keep(plan)
        return plan.event()

    async def _with_work(self, conv: str, history: list[Turn]) -> list[Turn]:
        """``history`` (newest first) with what was run for its newest turn (``Turn.work``), so a
        follow-up that corrects that turn ("use the other photo") is planned knowing its tasks,
        files and results; unchanged when the turn's record cannot be read (logged)."""
        if not history:
            return history
        try:
            views = await self.conversations.turns(conv)
        except StorageError as e:
            log.warning("could not read the record of turn %s/%d for the chat log: %s", conv, history[0].index, e)
            return history
        record = next((v.get("record") for v in views if v.get("index") == history[0].index), None)
        if not isinstance(record, dict):
            return history
        return [replace(history[0], work=work_summary(record)), *history[1:]]

    async def _conversation_turn(self, message: Message, files: list[tuple[IncomingFile, Inspected]]
                                 ) -> AsyncIterator[Event]:
        """A turn of ``message.key``'s conversation: stored, or answered without memory."""
        steps: list[str] = []
        key = message.key
        assert key is not None
        try:
            opened = await self._open_turn(message, files, steps)
        except StorageError as e:
            store_error("open_turn")
            if not message.memoryless_fallback:
                raise
            degraded_turn(key.platform)
            log.warning("conversation store failed at %s for %s, answering without memory: %s",
                        steps[-1] if steps else "?", key.as_string(), e)
            turn = self._memoryless_turn(message, files, e)
        else:
            turn = self._stored_turn(message, opened)
        async with contextlib.aclosing(turn) as events:
            async for event in events:
                yield event

    async def _open_turn(self, message: Message, files: list[tuple[IncomingFile, Inspected]], steps: list[str]
                         ) -> Request:
        """Begin a stored turn; its request. ``steps`` gets the name of each store call before it is
        made. Raises InputError (a file the conversation lacks: nothing stored) or StorageError (a
        begun turn is then marked failed, or kept to be)."""
        budget, key, text, chat_log = self.settings.storage.context_tokens, message.key, message.text, message.chat_log
        assert key is not None
        user = message.who.user if message.who is not None else None
        delivery = message.delivery.keys[0] if message.delivery is not None else None
        steps.append("get_or_create")
        conv = await self.conversations.get_or_create(key)
        steps.append("finish_turn of an unsaved turn")
        await self._unsaved.save(conv, self.conversations)  # a turn left running would make this one wait
        steps.append("context")
        history, earlier = await self.conversations.context(conv, budget)
        history = await self._with_work(conv, history) or list(chat_log)
        check_mentions(text, earlier, [info.kind for _, info in files], key.platform)
        steps.append("begin_turn")
        turn = await self.conversations.begin_turn(conv, text, user, delivery)
        try:
            steps.append("wait_turn")
            if await self.conversations.wait_turn(conv, turn):  # an earlier turn ran in another process: plan after it
                steps.append("context")
                history, earlier = await self.conversations.context(conv, budget)
                history = await self._with_work(conv, history) or list(chat_log)
            steps.append("add_resource")
            stored = [await self.conversations.add_resource(conv, turn, f.data, kind=info.kind, mime=info.mime,
                                                            origin="user", description=info.description, name=f.name)
                      for f, info in files]
        except BaseException:
            failed = RunRecord(request=text, status="error", error="This turn could not start.")
            await asyncio.shield(self._finish(key, conv, turn, failed))
            raise
        return Request(text=text, files=stored, resources=earlier, history=history, conversation_id=conv, turn=turn,
                       context=message.context)

    async def _stored_turn(self, message: Message, request: Request) -> AsyncIterator[Event]:
        """Run a begun turn and save it; with ``memoryless_fallback``, an output that cannot be
        stored fails its task only, and a failed save is told to the thread (once) after the answer."""
        conv, turn, key, on_start = request.conversation_id or "", request.turn, message.key, message.on_start
        storage_fallback = message.memoryless_fallback
        assert key is not None
        record: RunRecord | None = None
        sink: ResourceSink = self.conversations.sink(conv, turn)
        try:
            if on_start is not None:
                on_start(conv, turn)
            async for event in self._tracked(self._run(request, KeepOrFail(sink) if storage_fallback else sink, message)):
                if isinstance(event, Done):
                    record = event.record
                    error = await self._finish(key, conv, turn, record)
                    if error is not None and not storage_fallback:
                        raise error
                    if error is not None and self._told.first_time(key.as_string()):
                        record.notes.append(unsaved_sentence(error))
                        yield Notice(unsaved_sentence(error))
                yield event
        finally:
            if record is None:  # failed before the pipeline ended, or cancelled (shutdown, Ctrl-C)
                failed = RunRecord(request=request.text, status="error", error="This turn was interrupted before it finished.")
                await asyncio.shield(self._finish(key, conv, turn, failed))

    async def _memoryless_turn(self, message: Message, files: list[tuple[IncomingFile, Inspected]],
                               error: StorageError) -> AsyncIterator[Event]:
        """Answer without the store (``bot.degraded``): no stored history (the front end's
        ``message.chat_log`` only), this turn's files in the scratch space, nothing written to the store;
        the thread is told once (a :class:`Notice` first, also in ``record.notes``).

        Raises:
            InputError: the text names a file this turn lacks (the sentence says the thread's
                earlier files cannot be reached).
            StorageError: a file of the user's cannot be kept even in the scratch space.
        """
        key, text = message.key, message.text
        assert key is not None
        told = self._told.first_time(key.as_string())
        try:
            check_mentions(text, [], [info.kind for _, info in files], key.platform)
        except InputError as e:
            raise InputError(f"{lost_context_sentence(error)} {e.user_message}") from e
        sink = self._scratch.sink()
        stored = [await sink.add(f.data, kind=info.kind, mime=info.mime, origin="user", description=info.description,
                                 name=f.name) for f, info in files]
        if message.delivery is not None:  # answered here: no other process is to run it again
            await self._settle_delivery(message.delivery.keys[0])
        if message.on_start is not None:
            message.on_start(None, 0)
        note = without_memory_sentence(error)
        if told:
            yield Notice(note)
        request = Request(text=text, files=stored, history=list(message.chat_log), context=message.context)
        async for event in self._tracked(self._run(request, KeepOrFail(sink), message)):
            if isinstance(event, Done) and told:
                event.record.notes.insert(0, note)
            yield event

    async def _tracked(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """``events``, with the running task among those :meth:`close` cancels."""
        me = asyncio.current_task()
        if me is not None:
            self._inflight.add(me)
        try:
            async with contextlib.aclosing(events) as running:  # type: ignore[type-var]
                async for event in running:
                    yield event
        finally:
            if me is not None:
                self._inflight.discard(me)

    async def _finish(self, key: ConversationKey, conv: str, turn: int, record: RunRecord) -> StorageError | None:
        """Save turn ``turn`` of ``conv`` with ``record``; the storage's error (logged on one line,
        the turn kept to be saved before the thread's next turn) or ``None`` when saved (the thread
        is then told about a later failure again). Other errors are logged with their traceback."""
        try:
            await self.conversations.finish_turn(conv, turn, record)
        except StorageError as e:
            store_error("save_turn")
            log.error("could not save turn %s/%d (kept to save before the next turn of the thread): %s", conv, turn, e)
            self._unsaved.keep(conv, turn, record)
            return e
        except Exception:
            log.exception("could not save turn %s/%d", conv, turn)
            return None
        self._told.forget(key.as_string())
        return None


def _front_end(message: Message) -> str:
    """The front end a message came from: its requester's platform, else its conversation's; a
    message with neither is the one-shot command line's (``hugginggpt run``)."""
    if message.who is not None:
        return message.who.platform
    return message.key.platform if isinstance(message.key, ConversationKey) else "terminal"
