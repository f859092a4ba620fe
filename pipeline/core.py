"""The four stages wired together: ``Pipeline.run(request, sink)`` yields events.

    plan ──► select + execute (per task, concurrently) ──► respond (streamed)

Platform-agnostic: no front end, storage or platform library is imported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace

from . import prompts, tracing
from .decoding import Decoder
from .catalog.availability import Availability
from .coverage import answer_tail, coverage_report
from .errors import ControllerError, DeadlineError, HuggingGPTError, StoppedError
from .config import ExecutionLimits
from .cost import Pricing
from .execution import ExecutionRun, Executor
from .experts.base import ExpertRunner, RunnerKind
from .llm import Controller, Usage
from .response import fallback_answer, response_messages
from .selection import Selector
from .planning import PlanInvalid, plan_error, plan_stream, validate_plan
from .replanning import last_round_ids, replan_rounds, unsettled
from .run import PlanGate, RunState, events_until, next_or_stop
from .types import (
    Done,
    Event,
    Notice,
    PlanDiscarded,
    PlanReady,
    Request,
    ResourceSink,
    ResponseDelta,
    Round,
    RunRecord,
    Task,
    TaskPlanned,
)

log = logging.getLogger(__name__)

SERVED_TASKS_TTL = 300.0
"""Seconds the set of served tasks (for the planning prompt) is fresh; after that the last set is
still used while a new one is asked in the background."""
AVAILABILITY_NOTICE_AFTER = 1.0
"""Seconds a run waits for the served tasks before it says what it is waiting for."""
WAITING_FOR_HUB = "Checking on the Hugging Face Hub which models can run now…"
HUB_UNREACHABLE = (
    "The Hugging Face Hub could not be reached, so only the models known to be served "
    "(from the catalog and earlier checks) are offered."
)


class Pipeline:
    """HuggingGPT's four stages.

    Args:
        controller: the controller LLM.
        selector: model selection (catalog + availability).
        runners: the expert runner of each kind (``"hub"``, ``"controller"``, ``"local"``,
            :mod:`pipeline.experts`).
        limits: per-task timeout, overall deadline, models tried per task, re-planning rounds
            (:attr:`pipeline.config.PipelineConfig.execution`).
        decoder: the worker processes that read a video's sound and frames (it starts no process
            before the first video).
        pricing: the prices each plan is estimated with and each run charged with
            (:mod:`pipeline.cost`); ``None``: the records carry no estimate and no cost.
    """

    def __init__(
        self, controller: Controller, selector: Selector, runners: Mapping[RunnerKind, ExpertRunner], limits: ExecutionLimits,
        decoder: Decoder, pricing: Pricing | None = None,
    ) -> None:
        self.controller = controller
        self.pricing = pricing
        self.decoder = decoder
        self.selector = selector
        self.runners = dict(runners)
        self.limits = limits
        self.executor = Executor(selector, runners, limits)
        self._served: frozenset[str] | None = None
        self._served_at = float("-inf")
        self._asking: asyncio.Task[frozenset[str]] | None = None
        prompts.warm()  # templates compiled at start-up, not inside the first run

    def _replans(self, st: RunState) -> AsyncIterator[Event]:
        """The re-planning rounds of ``st``; with ``check_images``, the first also shows the
        generated images (decoded within the decoder's pixel limit) to be checked."""
        pixels = self.decoder.max_pixels if self.limits.check_images else None
        return replan_rounds(self.controller, st, self.limits.max_replans, check_pixels=pixels)

    def refresh_served_tasks(self) -> asyncio.Task[frozenset[str]]:
        """Start asking which tasks are served (Hub look-ups), unless that is under way; the bot
        calls it at start-up so the first request does not wait for the Hub."""
        if self._asking is None or self._asking.done():
            self._asking = asyncio.create_task(self._ask_served(), name="served-tasks")
        return self._asking

    async def aclose(self) -> None:
        """Stop a look-up of the served tasks still under way, and the decoding jobs still running."""
        await self.decoder.close()
        if self._asking is not None and not self._asking.done():
            self._asking.cancel()
            await asyncio.gather(self._asking, return_exceptions=True)

    async def _ask_served(self) -> frozenset[str]:
        served = frozenset(await self.selector.served_tasks())
        self._served, self._served_at = served, time.monotonic()
        return served

    async def served_tasks(self) -> frozenset[str]:
        """Names of the tasks the configured backends can serve now (``pipeline.tasks.TASKS`` keys).

        Fresh for :data:`SERVED_TASKS_TTL` seconds; after that the last set is returned at once
        while a new one is asked in the background, so only the very first call waits for the Hub.
        """
        if self._served is not None and time.monotonic() - self._served_at < SERVED_TASKS_TTL:
            return self._served
        asking = self.refresh_served_tasks()
        if self._served is not None:
            return self._served
        return await asyncio.shield(asking)

    def _planning_deadline(self) -> DeadlineError:
        deadline = self.limits.deadline
        return DeadlineError(
            f"The run's deadline of {deadline:g} seconds passed during task planning; nothing was run.",
            f"deadline {deadline:g} s passed during task planning",
        )

    async def _plan(
        self, request: Request, available: frozenset[str], usage: Usage, run: ExecutionRun | None,
        emit: Callable[[Event], None], end: float, record: RunRecord,
    ) -> list[Task]:
        """Task planning, streamed: early tasks join ``run`` as they are announced (``None``: they
        wait for the whole plan), and leave it when the finished plan proves invalid. Returns the
        validated plan.

        Raises:
            DeadlineError, PlanError, ControllerError.
        """
        try:
            async with asyncio.timeout_at(end):
                async for item in plan_stream(self.controller, request, available, usage):
                    if isinstance(item, TaskPlanned):
                        if run is not None:  # with a gate (a budget, an approval) nothing starts early
                            emit(item)
                            run.start(item.task)
                    elif isinstance(item, PlanDiscarded):
                        if run is not None:
                            await run.cancel()
                        record.notes.append(_discarded_note(item))
                        emit(item)
                    else:
                        record.notes.extend(item.notes)
                        return list(item.tasks)
        except TimeoutError:
            raise self._planning_deadline() from None
        raise RuntimeError("task planning ended without a plan")  # plan_stream always ends with PlanReady

    def _hub_unreachable(self) -> bool:
        availability = self.selector.availability
        return isinstance(availability, Availability) and availability.hub_unreachable

    async def run(self, request: Request, sink: ResourceSink, *, stop: asyncio.Event | None = None, gate: PlanGate | None = None) -> AsyncIterator[Event]:
        """Run one request through the four stages, within the run's deadline.

        The deadline (``limits.deadline`` seconds from the call) covers the whole run: task
        planning with its repair round, model selection, task execution and the streamed answer,
        the controller SDK's retries and ``Retry-After`` waits included. When it passes, what is in
        flight is cancelled and the answer covers what finished (their files are still in the
        record); when it passes before the answer starts, the answer is written here without the
        controller (:func:`pipeline.response.fallback_answer`).

        Args:
            request: the request (its files already checked and stored); sink: where generated files are stored.
            stop: set by a front end when the user stops the run (a Stop button, Ctrl-C once). Like
                a deadline passing now: tasks in flight are cancelled (``failed``, "Stopped before
                it finished."), and the answer is written without the controller from what finished
                (cut where it was if it was streaming); stopped during planning, the run ends with
                a :class:`StoppedError` sentence. ``record.stopped`` is set.
            gate: asked before a plan's tasks run (:data:`pipeline.run.PlanGate`); tasks then wait for the whole plan.

        Yields:
            ``PlanReady``, then per task ``ModelSelected`` / ``TaskStarted`` / ``TaskFinished`` |
            ``TaskFailed`` | ``TaskSkipped`` as they happen; when a task failed, was skipped or
            came back blank, up to ``limits.max_replans`` re-planning rounds (``ReplanStarted``, then
            the further tasks' ``PlanReady`` and events; :mod:`pipeline.replanning`); then
            ``ResponseDelta`` pieces, and always a final ``Done`` whose record has ``status``
            ``"ok"`` (every task succeeded, or the last re-plan's tasks did),
            ``"partial"`` (answered; a task failed or was skipped, a part was left out, the deadline passed) or
            ``"error"`` (with the user's sentence in ``error``), and ``deadline_passed``/``stopped``.

        Cancellation (Ctrl-C, shutdown) propagates after in-flight tasks are cancelled.
        """
        loop = asyncio.get_running_loop()
        record = RunRecord(request=request.text, conversation_id=request.conversation_id, turn=request.turn)
        st = RunState(request, stop, loop, loop.time() + self.limits.deadline, record, pricing=self.pricing, gate=gate)
        try:
            async with contextlib.aclosing(self._video_parts(st, sink)) as notices:
                async for event in notices:
                    yield event
            async with contextlib.aclosing(self._available_tasks(st)) as notices:
                async for event in notices:
                    yield event
            async with contextlib.aclosing(self._plan_and_execute(st, sink)) as events:
                async for event in events:
                    yield event
            if record.status != "awaiting approval":  # a plan waiting for a person runs nothing more
                async with contextlib.aclosing(self._after_plan(st)) as rest:
                    async for event in rest:
                        yield event
        except HuggingGPTError as e:
            record.status = "error"
            record.error = e.user_message
            record.failure = e
            record.deadline_passed = record.deadline_passed or isinstance(e, DeadlineError)
            log.warning("run failed during %s: %s", st.stage, e)
        st.close_record()
        yield Done(record)

    async def _after_plan(self, st: RunState) -> AsyncIterator[Event]:
        """What follows the executed plan: the re-planning rounds, then the answer."""
        async with contextlib.aclosing(self._replans(st)) as rounds:
            async for event in rounds:
                yield event
        _collect_files(st.record, st.tasks)
        st.stage = "response generation"
        async with contextlib.aclosing(tracing.spanned("response generation", self._respond(st))) as deltas:
            async for event in deltas:
                yield event

    async def _video_parts(self, st: RunState, sink: ResourceSink) -> AsyncIterator[Event]:
        """The sound and a few frames of each video of this turn become resources of their own
        (:func:`pipeline.video_parts.add_video_parts`), added to ``st.request.files``; a video that
        cannot be read is said in a notice. Given at most a quarter of the time left."""
        if not any(f.kind == "video" for f in st.request.files):
            return
        from .video_parts import add_video_parts  # PyAV is imported only when a video comes

        parts, notes = await add_video_parts(st.request.files, sink, decoder=self.decoder,
                                             timeout=max(1.0, min(self.decoder.timeout, st.left() / 4)))
        st.request = replace(st.request, files=[*st.request.files, *parts])
        for note in notes:
            st.record.notes.append(note)
            yield Notice(note)

    async def _available_tasks(self, st: RunState) -> AsyncIterator[Event]:
        """Wait (within the deadline) for the served tasks, saying so when it takes a while or the
        Hub is unreachable; sets ``st.available``.

        Raises:
            DeadlineError: the deadline passed first.
        """
        asking = asyncio.ensure_future(self.served_tasks())
        try:
            # Events are yielded outside the deadline's scope (never suspend an async
            # generator inside asyncio.timeout: it would cancel the consumer instead).
            done, _ = await asyncio.wait({asking}, timeout=min(AVAILABILITY_NOTICE_AFTER, max(0.0, st.left())))
            if not done:
                st.record.notes.append(WAITING_FOR_HUB)
                yield Notice(WAITING_FOR_HUB)
            async with asyncio.timeout_at(st.end):
                st.available = await asking
            if self._hub_unreachable():
                st.record.notes.append(HUB_UNREACHABLE)
                yield Notice(HUB_UNREACHABLE)
            st.available, offered = self.selector.offered_tasks(st.available, st.request.text)
            st.down = self.selector.placement_notes()
            for note in [*st.down, *offered]:
                st.record.notes.append(note)
                yield Notice(note)
        except TimeoutError:
            raise self._planning_deadline() from None

    async def _plan_and_execute(self, st: RunState, sink: ResourceSink) -> AsyncIterator[Event]:
        """Task planning, streamed, with each task starting as soon as its record is complete and
        valid (eager dispatch, so execution overlaps the rest of the plan being written), then the
        execution of the validated plan; sets ``st.tasks`` and the record's plan and results.

        Raises:
            StoppedError: the user stopped the run before its plan was ready.
            DeadlineError, PlanError, ControllerError: from task planning.
        """
        record, stop = st.record, st.stop
        queue: asyncio.Queue[Event] = asyncio.Queue()
        run = self.executor.start(st.request, sink, queue.put_nowait, st.usage, end=st.end)
        planning = (_approved(st) if st.request.plan is not None else
                    tracing.traced("task planning", self._plan(st.request, st.available, st.usage,
                                                               run if st.gate is None else None,
                                                               queue.put_nowait, st.end, record)))
        planner = asyncio.create_task(planning)
        work: asyncio.Task | None = None
        try:
            async for event in events_until(queue, planner, stop):
                yield event
            if planner.cancelled():  # the user stopped it (events_until cancelled it)
                raise StoppedError("You stopped this run before its plan was ready.")
            st.tasks = record.tasks = planner.result()
            st.run = run
            record.rounds.append(Round(1, tuple(t.id for t in st.tasks)))
            record.timings_ms["planning"] = (time.monotonic() - st.t0) * 1000
            if st.pricing is not None:
                record.estimate = st.pricing.estimate(st.tasks, st.usage)
            yield PlanReady(tuple(st.tasks), estimate=record.estimate)
            if not st.tasks:
                return
            if st.gate is not None and await st.gate(tuple(st.tasks), record.estimate):
                record.status = "awaiting approval"  # run() ends here: the plan waits for a person
                return
            st.stage = "task execution"
            for t in st.tasks:
                run.start(t)
            work = asyncio.create_task(run.finish(stop))
            async for event in events_until(queue, work):
                yield event
            record.selections, record.results = work.result()
            record.timings_ms["execution"] = (time.monotonic() - (run.first_start or time.monotonic())) * 1000
        finally:
            for job in (planner, work):
                if job is not None and not job.done():
                    job.cancel()
                    await asyncio.gather(job, return_exceptions=True)
            if work is None:
                await run.cancel()

    async def _respond(self, st: RunState) -> AsyncIterator[Event]:
        """Response generation, streamed; cut short by the deadline or a stop, in which case the
        answer ends with a note (or is written here from what finished). Sets the record's
        response and status.

        Raises:
            ControllerError: the answer is empty.
        """
        record = st.record
        t2 = time.monotonic()
        parts: list[str] = []
        stopped = st.stopped
        if st.left() <= 0:
            record.deadline_passed = True
        elif not stopped:
            async with contextlib.aclosing(self._stream_answer(st, parts)) as deltas:
                async for event in deltas:
                    yield event
            stopped = st.stopped_while_writing
        tail = _cut_answer_tail(st, bool(parts), stopped, self.limits.deadline)
        unfinished = unsettled(st.tasks, record.results, last_round_ids(record.rounds))
        cut = stopped or record.deadline_passed  # the answer written here already lists what did not finish
        covered = coverage_report(st.request, st.tasks, record.selections, record.results, st.available, st.down,
                                  () if cut else unfinished)
        if parts or tail:  # an empty answer stays an error, not a list of what was left out
            tail += answer_tail(covered)
        if tail:
            parts.append(tail)
            yield ResponseDelta(tail)
        record.response = "".join(parts).strip()
        record.timings_ms["response"] = (time.monotonic() - t2) * 1000
        if not record.response:
            raise ControllerError("The controller LLM returned an empty answer.")
        record.notes += covered.sentences
        record.left_out = covered.left_out
        partial = unfinished or record.deadline_passed or stopped or covered.skipped
        record.status = "partial" if partial else "ok"

    async def _stream_answer(self, st: RunState, parts: list[str]) -> AsyncIterator[Event]:
        """The controller's answer as ``ResponseDelta`` pieces (also appended to ``parts``) until it
        ends, the deadline passes (``record.deadline_passed``) or the user stops the run
        (``st.stopped_while_writing``)."""
        record = st.record
        stream = self.controller.stream_text(
            response_messages(st.request, st.tasks, record.selections, record.results),
            stage="response-generation", usage=st.usage,
        )
        try:
            while True:
                try:
                    delta = await next_or_stop(stream, st.left(), st.stop)
                except StopAsyncIteration:
                    break
                if delta is None:
                    st.stopped_while_writing = True
                    break
                parts.append(delta)
                yield ResponseDelta(delta)
        except TimeoutError:
            record.deadline_passed = True
        finally:
            await stream.aclose()


async def _approved(st: RunState) -> list[Task]:
    """An approved plan (:attr:`Request.plan`), validated again against the tasks served now and
    this turn's files, as a planned one is.

    Raises:
        PlanError: it no longer fits (a task not served now, a file gone).
    """
    plan = st.request.plan or ()
    try:
        return validate_plan([t.to_json() for t in plan], available=st.available, resources=st.request.resources,
                             request_text=st.request.text)
    except PlanInvalid as e:
        raise plan_error(e) from None


def _collect_files(record: RunRecord, tasks: list[Task]) -> None:
    """The files the tasks generated, in plan order, each once, into ``record.files``."""
    seen: set[str] = set()
    for t in tasks:
        r = record.results.get(t.id)
        if r and r.output:
            for f in r.output.files:
                if f.id not in seen:
                    seen.add(f.id)
                    record.files.append(f)


def _cut_answer_tail(st: RunState, streamed: bool, stopped: bool, deadline: float) -> str:
    """What ends an answer cut short: a note after the streamed part, or (nothing streamed) an
    answer written from what finished; ``""`` when the answer was not cut."""
    record = st.record
    if stopped:
        if streamed:
            return "\n\n(You stopped this run while this answer was being written; it is cut here.)"
        return fallback_answer(st.tasks, record.selections, record.results, "You stopped this run; here is what finished.")
    if not record.deadline_passed:
        return ""
    note = f"The run's deadline of {deadline:g} seconds passed"
    if streamed:
        return f"\n\n({note} while this answer was being written; it is cut here.)"
    return fallback_answer(st.tasks, record.selections, record.results,
                           f"{note} before the answer could be written; here is what finished.")


def _discarded_note(item: PlanDiscarded) -> str:
    n = len(item.task_ids)
    return (f"The finished plan was invalid ({item.problem}); the {n} task{'s' if n != 1 else ''} started "
            "early were stopped and the controller was asked to fix the plan.")
