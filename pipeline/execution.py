"""Stage 3, task execution (HuggingGPT §3.3): an asyncio scheduler over the task graph.

Every task is its own coroutine that starts at once: its model selection runs immediately
(concurrently with other tasks' work), then it waits only for its *own* dependencies, so a task
starts the moment its producers finish (not level by level). ``<resource>-N`` placeholders are
replaced by the dependency's output of the right modality, also inside longer text. A failed
dependency skips its dependents with that reason. A model that is gone, refuses or keeps failing
(after the experts' own retries on 429/503/timeouts) is replaced by the next candidate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import tracing
from .config import ExecutionLimits
from .errors import ControllerError, ExpertError
from .experts.base import ExpertRunner, RunnerKind
from .llm import Usage
from .media import decode_text
from .planning import MAX_TEXT_ARG
from .selection import Selector
from .tasks import TASKS
from .tasks.multimodal import vlm_args
from .types import (
    PLACEHOLDER, placeholder_id,
    Event,
    ModelSelected,
    Request,
    Resource,
    ResourceSink,
    Selection,
    Task,
    TaskFailed,
    TaskFinished,
    TaskResult,
    TaskSkipped,
    TaskStarted,
)

log = logging.getLogger(__name__)


PLACES = {"local": "expert server", "in-process": "local", "provider": "provider", "gateway": "gateway",
          "endpoint": "endpoint", "controller": "controller", "mcp": "mcp"}
"""First word of where a model ran (:attr:`pipeline.types.Output.where`) → the place a task's span
names: the team's expert server, this process, an Inference Provider, a gateway or dedicated
endpoint, the controller, an MCP server."""


def where_attributes(where: str | None) -> dict[str, str]:
    """A span's ``where`` (:data:`PLACES`) and ``where.target`` (the server, provider or endpoint)
    from :attr:`pipeline.types.Output.where` (``"local http://gpu1:8081"``); ``{}`` for ``None``."""
    if not where:
        return {}
    kind, _, target = where.partition(" ")
    return {"where": PLACES.get(kind, kind), **({"where.target": target} if target else {})}


class ResolveError(Exception):
    """A placeholder could not be resolved (the dependency produced no such output)."""


def _document_text(document: Resource) -> str:
    """The text a text argument naming ``document`` gets: its content, cut to
    :data:`pipeline.planning.MAX_TEXT_ARG` characters (as long as a text a plan may write; the
    file's description says so when cut). Blocking: run it in a worker thread. The file is at most
    ``[storage] max_text_file_bytes``, checked when it was accepted.

    Raises:
        ResolveError: the file cannot be read, or is neither UTF-8 nor UTF-16 with a byte-order mark.
    """
    try:
        return decode_text(document.path.read_bytes())[:MAX_TEXT_ARG]
    except (OSError, UnicodeDecodeError) as e:
        raise ResolveError(f"{document.id} cannot be read ({e.__class__.__name__})") from None


async def resolve_args(task: Task, results: dict[int, TaskResult], resources: dict[str, Resource]) -> dict[str, str | Resource]:
    """Replace placeholders and resource ids by values; a text file's content is read in a worker
    thread (:func:`_document_text`), not on the event loop.

    Args:
        task: a validated task (file arguments are resource ids or ``<resource>-N``).
        results: finished results of its dependencies (status ``ok``).
        resources: the conversation's resources by id.

    Returns:
        Argument key to ``str`` (text) or :class:`Resource` (file).

    Raises:
        ResolveError: a dependency produced nothing of the needed modality.
    """
    spec = TASKS[task.task]
    out: dict[str, str | Resource] = {}
    for key, value in task.args.items():
        kind = spec.allowed[key]
        if kind == "text":

            def text_of(m: Any) -> str:
                n = placeholder_id(m)
                res = results[n].output
                text = res.text if res else None
                if text is None:
                    raise ResolveError(f"task {n} produced no text for task {task.id}")
                return text

            document = resources.get(value)
            if document is not None and document.kind == "text":  # a text file: its content
                out[key] = await asyncio.to_thread(_document_text, document)
                continue
            out[key] = PLACEHOLDER.sub(text_of, value)
        else:
            m = PLACEHOLDER.fullmatch(value)
            if m:
                n = placeholder_id(m)
                res = results[n].output
                got = res.modality(kind) if res else None
                if not isinstance(got, Resource):
                    raise ResolveError(f"task {n} produced no {kind} for task {task.id}")
                out[key] = got
            else:
                if value not in resources:  # validation guarantees this; never fall back to a path
                    raise ResolveError(f"{value} is not a file of this conversation")
                out[key] = resources[value]
    return out


class Executor:
    """Runs a validated plan.

    Args:
        selector: model selection.
        runners: the expert runner of each kind a selection may name (``Selection.runner``).
        limits: time limits.
    """

    def __init__(self, selector: Selector, runners: Mapping[RunnerKind, ExpertRunner], limits: ExecutionLimits) -> None:
        self.selector = selector
        self.runners = dict(runners)
        self.limits = limits

    async def execute(
        self,
        tasks: list[Task],
        request: Request,
        sink: ResourceSink,
        emit: Callable[[Event], None],
        usage: Usage,
        *,
        end: float | None = None,
    ) -> tuple[dict[int, Selection], dict[int, TaskResult]]:
        """Run every task of a whole plan as soon as its dependencies are done (see
        :class:`ExecutionRun`, which also takes tasks one by one while a plan streams).

        Returns:
            Selections and results by task id.

        Raises:
            HuggingGPTError: as :meth:`ExecutionRun.finish`.
        """
        run = self.start(request, sink, emit, usage, end=end)
        for task in tasks:
            run.start(task)
        return await run.finish()

    def start(
        self, request: Request, sink: ResourceSink, emit: Callable[[Event], None], usage: Usage, *, end: float | None = None
    ) -> ExecutionRun:
        """An execution of one plan that tasks can join one by one (:meth:`ExecutionRun.start`).

        Args:
            request: the request (its resources are the files tasks may read).
            sink: where generated files are stored.
            emit: called with each event as it happens (never blocks).
            usage: LLM call counter.
            end: the run's deadline as an event-loop time (``loop.time()`` seconds); default
                ``limits.deadline`` seconds from now.
        """
        if end is None:
            end = asyncio.get_running_loop().time() + self.limits.deadline
        return ExecutionRun(self, request, sink, emit, usage, end)

    async def _run_models(
        self,
        task: Task,
        selection: Selection,
        order: list[str],
        args: dict[str, str | Resource],
        sink: ResourceSink,
        emit: Callable[[Event], None],
        usage: Usage,
    ) -> TaskResult:
        tried: list[str] = []
        last_error = "no model could run it"
        started = time.monotonic()
        runner = self.runners.get(selection.runner)
        if runner is None:
            return TaskResult(task.id, "failed", error=f"No {selection.runner} runner is configured.",
                              started=started, finished=time.monotonic())
        run_as, run_args = task.task, args
        if selection.runs_as is not None:  # a VLM standing in for a vision task: ask it the task's question
            run_as, run_args = selection.runs_as, vlm_args(task.task, args)
        for model in order[: self.limits.max_candidates_tried]:
            tried.append(model)
            emit(TaskStarted(task.id, model))
            try:
                with tracing.span("expert call", {"model.id": model, "runner": selection.runner,
                                                  "attempt": len(tried)}) as call:
                    async with asyncio.timeout(self.limits.task_timeout):
                        output = await runner.run(run_as, model, run_args, sink, task_id=task.id, usage=usage)
                    tracing.annotate(call, where_attributes(output.where))
                return TaskResult(task.id, "ok", output=output, model=model, attempts=tried, started=started, finished=time.monotonic())
            except TimeoutError:
                last_error = f"{model} did not answer within {self.limits.task_timeout:g} seconds"
                log.warning("task %d: %s", task.id, last_error)
            except ExpertError as e:
                last_error = e.user_message.rstrip(".")
                log.warning("task %d: model %s failed (%s): %s", task.id, model, e.reason, e)
                if e.reason == "billing":  # no credits: every other model would be refused alike
                    break
            except ControllerError as e:
                last_error = e.user_message.rstrip(".")
                log.warning("task %d: controller task failed: %s", task.id, e)
        n = len(tried)
        tail = f" (tried {n} models)" if n > 1 else ""
        return TaskResult(
            task.id,
            "failed",
            error=f"{last_error}{tail}.",  # every front end names the task and says it failed
            model=tried[-1] if tried else None,
            attempts=tried,
            started=started,
            finished=time.monotonic(),
        )


class ExecutionRun:
    """The execution of one plan: each task starts the moment it joins (:meth:`start`) and its
    own dependencies are done, never later (HuggingGPT §3.3). Made by :meth:`Executor.start`."""

    def __init__(
        self, executor: Executor, request: Request, sink: ResourceSink, emit: Callable[[Event], None], usage: Usage, end: float
    ) -> None:
        self.executor = executor
        self.request = request
        self.sink = sink
        self.emit = emit
        self.usage = usage
        self.end = end
        self.resources = {r.id: r for r in request.resources}
        self.selections: dict[int, Selection] = {}
        self.results: dict[int, TaskResult] = {}
        self.tasks: dict[int, Task] = {}
        self._done: dict[int, asyncio.Future[TaskResult]] = {}
        self._runners: dict[int, asyncio.Task[None]] = {}
        self.first_start: float | None = None
        """``time.monotonic()`` when the first task joined (``None`` before)."""
        self.selection_seconds = 0.0
        """Time the tasks' model selections took, summed (seconds; they run in parallel)."""
        self.parent = tracing.current()  # the turn's span: a round's execution span is its child
        self.span: Any = None
        """The open ``task execution`` span of this round's tasks (:mod:`pipeline.tracing`), or ``None``."""

    def _future(self, task_id: int) -> asyncio.Future[TaskResult]:
        if task_id not in self._done:
            self._done[task_id] = asyncio.get_running_loop().create_future()
        return self._done[task_id]

    def started(self, task_id: int) -> bool:
        """Whether task ``task_id`` has joined."""
        return task_id in self._runners

    def start(self, task: Task) -> None:
        """Let ``task`` run as soon as its dependencies are done (they may join later)."""
        if task.id in self._runners:
            return
        self.tasks[task.id] = task
        if self.first_start is None:
            self.first_start = time.monotonic()
        self._future(task.id)
        if tracing.enabled():
            if self.span is None:
                self.span = tracing.start("task execution", parent=self.parent)
            job = self._traced(task)
        else:
            job = self._run_one(task)
        self._runners[task.id] = asyncio.create_task(job, name=f"task-{task.id}")

    def _end_span(self, attributes: dict[str, Any] | None = None) -> None:
        tracing.end(self.span, {"tasks": len(self.tasks), **(attributes or {})})
        self.span = None

    async def _traced(self, task: Task) -> None:
        """:meth:`_run_one` inside the task's span, a child of this round's execution span."""
        with tracing.span("task", {"task.id": task.id, "task.tag": task.task}, parent=self.span) as span:
            try:
                await self._run_one(task)
            except asyncio.CancelledError:
                tracing.annotate(span, {"outcome": "cancelled"})
                raise
            result, selection = self.results.get(task.id), self.selections.get(task.id)
            if result is not None:
                where = result.output.where if result.output is not None else None
                tracing.annotate(span, {"outcome": result.status, "model.id": result.model, "attempts": len(result.attempts),
                                        "runner": selection.runner if selection is not None else None,
                                        **where_attributes(where)})

    async def _select(self, task: Task) -> tuple[Selection, list[str]]:
        """The task's model selection (:meth:`pipeline.selection.Selector.select`), in its span when
        it may ask the controller (``"top"`` selection is a look-up: the task's span names its model)."""
        selector = self.executor.selector
        if selector.strategy == "top":
            return await selector.select(task, self.request.text, self.usage)
        with tracing.span("model selection") as span:
            selection, order = await selector.select(task, self.request.text, self.usage)
            tracing.annotate(span, {"model.id": selection.model, "runner": selection.runner, "candidates": len(order)})
            return selection, order

    async def cancel(self) -> None:
        """Stop every task (the plan they came from proved invalid) and forget them."""
        runners = list(self._runners.values())
        for r in runners:
            r.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
        self._end_span({"discarded": True})
        self._runners.clear()
        self._done.clear()
        self.tasks.clear()
        self.selections.clear()
        self.results.clear()

    async def finish(self, stop: asyncio.Event | None = None) -> tuple[dict[int, Selection], dict[int, TaskResult]]:
        """Wait for every task that joined, until the deadline (``end``) or ``stop`` is set.

        Args:
            stop: set by the front end when the user stops the run (a Stop button, Ctrl-C).

        Returns:
            Selections and results by task id. A task unfinished at the deadline or at the stop is
            cancelled and ``failed`` with a sentence saying so (no event is emitted for a stopped
            one: the front ends mark what was still running as stopped when the run ends).

        Raises:
            HuggingGPTError: an error that is not the model's (e.g. storage full while saving an
                output) ends the run: no other model is tried.
        """
        runners = list(self._runners.values())
        deadline = self.executor.limits.deadline
        gathering = asyncio.gather(*runners)
        stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
        cut: str | None = None
        stopped = False
        try:
            async with asyncio.timeout_at(self.end):
                await asyncio.wait([f for f in (gathering, stopping) if f is not None], return_when=asyncio.FIRST_COMPLETED)
            if gathering.done():
                gathering.result()  # an error that is not the model's ends the run
            else:
                cut, stopped = "Stopped before it finished.", True
        except TimeoutError:
            cut = f"The run's deadline of {deadline:g} seconds passed before task {{tid}} finished."
        finally:
            if stopping is not None:
                stopping.cancel()
            pending = [r for r in runners if not r.done()]
            for r in pending:
                r.cancel()
            if pending or not gathering.done():
                await asyncio.gather(gathering, *pending, return_exceptions=True)
        if cut is not None:
            for tid in self.tasks:
                res = self.results.get(tid)
                if res is None or (res.status == "failed" and res.error is None):
                    res = TaskResult(tid, "failed", error=cut.format(tid=tid))
                    self.results[tid] = res
                    if not stopped:
                        self.emit(TaskFailed(res))
        self._end_span()
        return self.selections, self.results

    def _timed(self, began: float) -> Callable[[asyncio.Future], None]:
        """A done callback adding the time since ``began`` to :attr:`selection_seconds`."""
        def add(selecting: asyncio.Future) -> None:
            if not selecting.cancelled():  # a task skipped for its dependency never needed its model
                self.selection_seconds += time.monotonic() - began
        return add

    async def _run_one(self, task: Task) -> None:
        ex, emit, usage = self.executor, self.emit, self.usage
        result = TaskResult(task.id, "failed")
        try:
            selecting = asyncio.create_task(self._select(task))
            selecting.add_done_callback(self._timed(time.monotonic()))
            try:
                deps = [await self._future(d) for d in task.dep]
            except BaseException:
                selecting.cancel()
                raise
            bad = [r for r in deps if r.status != "ok"]
            if bad:
                selecting.cancel()
                first = bad[0]
                result = TaskResult(task.id, "skipped", error=f"Task {first.task_id}, whose output it needs, did not succeed.")
                emit(TaskSkipped(result))
                return
            try:
                selection, order = await selecting
            except LookupError as e:
                result = TaskResult(task.id, "failed", error=str(e))
                emit(TaskFailed(result))
                return
            self.selections[task.id] = selection
            emit(ModelSelected(selection))
            try:
                args = await resolve_args(task, self.results, self.resources)
            except ResolveError as e:
                log.warning("task %d: %s", task.id, e)
                result = TaskResult(task.id, "failed", error=f"Task {task.id} could not get its input: {e}.")
                emit(TaskFailed(result))
                return
            result = await ex._run_models(task, selection, order, args, self.sink, emit, usage)
            emit(TaskFinished(result) if result.status == "ok" else TaskFailed(result))
        finally:
            self.results[task.id] = result
            fut = self._future(task.id)
            if not fut.done():
                fut.set_result(result)
