"""One queue per model, one worker draining it, inference in a thread.

A request becomes a :class:`Job` (its prepared input, a future, its deadline, and the function
that gives back the memory its input holds in the pool: called once the job leaves the queue
unrun, or once its batch has run, so a decoded input counts until nothing references it). The
model's worker takes the next job and, for tasks whose pipelines batch, the jobs behind it (up to
``max_batch_size``, waiting at most ``batch_window_ms`` from the first for more, and after a batch of
several for the callers it answered: :class:`Refill`), skips those whose
caller gave up (cancelled, deadline passed: their slot is free at once, and they are skipped again
once the model is loaded, just before the run), loads the model through the pool (once, however
many requests wait) and runs the batch in the executor: one call of the task's pipeline on the
list. When that call raises, the batch's items are run again one by one, so an input that fails
fails alone (500, one log line) and the others are answered. An out-of-memory error unloads the
model and fails the batch's jobs with :class:`~expert_server.errors.OutOfMemory`.
:class:`BatchStats` counts the runs and their sizes (``GET /models`` lists them per model).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from . import memory, tracing
from .config import format_size
from .errors import Busy, ExpertError, ModelFailed, OutOfMemory, shown
from .pool import Pool

log = logging.getLogger(__name__)


@dataclass
class Job:
    """One request waiting for its model: ``item`` is the task's prepared input."""

    item: Any
    future: asyncio.Future
    deadline: float  # time.monotonic()
    release: Callable[[], None] | None = None
    trace: Any = None  # the request's trace context (expert_server.tracing.current), None when off
    queued: int = 0  # expert_server.tracing.now() when queued
    arrived: float = field(default_factory=time.monotonic)  # when queued, for the batch window

    @property
    def live(self) -> bool:
        return not self.future.done() and time.monotonic() < self.deadline

    def done(self) -> None:
        """Give back the input's memory (once) and drop the input."""
        release, self.release, self.item = self.release, None, None
        if release is not None:
            release()


Run = Callable[[Any, list[Any]], list[Any]]


@dataclass
class BatchStats:
    """What a model's worker ran: ``runs`` (calls of the task on a batch, retries one by one not
    counted), ``items`` (requests in them), ``largest`` (items of the largest), ``retried``
    (batches whose call raised and were run again one by one)."""

    runs: int = 0
    items: int = 0
    largest: int = 0
    retried: int = 0

    def add(self, size: int) -> None:
        """Count one run of ``size`` items."""
        self.runs, self.items, self.largest = self.runs + 1, self.items + size, max(self.largest, size)


@dataclass
class Refill:
    """What the model waits for after running a batch of several requests: ``callers`` jobs (as
    many as it answered, plus those already waiting then, at most the batch limit) until ``until``
    (``time.monotonic()``): ``batch_refill_ms`` after the batch ended, and at most
    :data:`REFILL_SHARE` of its run time.

    Callers that wait for each answer before they send again (a bot's parallel tasks, a client's
    pool of connections) come back together a little after their batch ends. Run at once, the
    first to come back would make a small batch, and the others the next one: batches alternate
    between two sizes, each paying the model's fixed cost per call (its weights read once per call:
    a 6-layer BERT answers 16 texts in 32 ms and 8 in 19 ms on one core). Waiting for them fills the
    batch; the wait ends as soon as they are in. Its bound: 16 clients of the server on the 2-core
    development machines sent again 5–24 ms after their batch ended, and waiting longer than half a
    batch's run time cannot be won back by the next one. Triton's dynamic batcher counts its delay
    from the oldest request's arrival (``batch_window_ms`` here), TorchServe's from when the worker
    is free; this wait is for the callers the model just answered, so a lone caller never waits for
    it. Figures: ``python -m benchmarks.bench_experts --batching``."""

    callers: int
    until: float


REFILL_SHARE = 0.5
"""The most of a batch's run time the model waits after it for the callers it answered."""


def is_oom(e: BaseException) -> bool:
    """Whether ``e`` is running out of memory: ``torch.OutOfMemoryError`` (CUDA, and CPU in recent
    torch), ``MemoryError``, or torch's CPU allocator failure (a ``RuntimeError``)."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text)


def _live(jobs: list[Job]) -> list[Job]:
    """The jobs of ``jobs`` whose caller still waits; the others are done with (their memory given back)."""
    for j in jobs:
        if not j.live:
            j.done()
    return [j for j in jobs if j.item is not None]


class ModelQueue:
    """The queue and worker of one model.

    Args:
        model_id: the model. pool: where it is loaded. run: ``(runner, items) -> results`` (blocking,
        one result per item, or an exception instance for an item that failed alone).
        batch: whether several items may go in one call. max_batch: items per call at most.
        window: seconds the oldest job of a batch may wait, from its arrival, for more.
        refill: after a batch of several, seconds the model may wait for the callers it answered
        (:class:`Refill`; 0: it does not). limit: jobs waiting before 503 "busy".
        min_free: on CPU, the free RAM (bytes) below which no inference starts (counts as out of
        memory), 0 for no floor.
    """

    def __init__(self, model_id: str, pool: Pool, run: Run, executor: Executor, *, batch: bool, max_batch: int,
                 window: float, refill: float, limit: int, min_free: int = 0) -> None:
        self.model_id, self.pool, self.run, self.executor = model_id, pool, run, executor
        self.max_batch = max_batch if batch else 1
        self.window, self.refill, self.min_free = window, refill, min_free
        self._after: Refill | None = None  # what the model waits for after its last batch
        self.queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=limit)
        self.stats = BatchStats()
        self._worker: asyncio.Task | None = None

    def submit(self, item: Any, deadline: float, release: Callable[[], None] | None = None) -> asyncio.Future:
        """Queue ``item``; returns the future of its result. ``release`` is called once the item
        is done with (run, dropped, or the queue closed), not when the caller stops waiting.

        Raises:
            Busy: the queue is full (``release`` is then the caller's to call).
        """
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(Job(item, fut, deadline, release, tracing.current(), tracing.now()))
        except asyncio.QueueFull:
            raise Busy(f"The model {self.model_id} has {self.queue.qsize()} requests waiting; try again shortly.") from None
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"worker {self.model_id}")
        return fut

    async def _take(self) -> list[Job]:
        """The next batch: the oldest waiting job and those after it, up to ``max_batch``, waiting
        for more only until the oldest has waited ``window`` seconds since it arrived (as Triton's
        dynamic batcher's ``max_queue_delay``: jobs that queued while the previous batch ran have
        waited already), or, after a batch of several, while fewer than the callers it answered are
        back (:class:`Refill`)."""
        jobs = [await self.queue.get()]
        while len(jobs) < self.max_batch:
            try:
                jobs.append(self.queue.get_nowait())
            except asyncio.QueueEmpty:
                left = self._end(jobs) - time.monotonic()
                if left <= 0:
                    break
                try:
                    jobs.append(await asyncio.wait_for(self.queue.get(), left))
                except TimeoutError:
                    break
        self._after = None
        return _live(jobs)

    def _end(self, jobs: list[Job]) -> float:
        """When the batch of ``jobs`` stops waiting for more (``time.monotonic()``)."""
        end = jobs[0].arrived + self.window
        after = self._after
        if after is not None and len(jobs) < after.callers:
            end = max(end, after.until)
        return end

    async def _work(self) -> None:
        while True:
            jobs = await self._take()
            if not jobs:
                continue
            try:
                jobs, results = await self._run(jobs)
            except OutOfMemory as e:
                self.pool.unload(self.model_id)
                results = [e] * len(jobs)
            except ExpertError as e:
                results = [e] * len(jobs)
            except asyncio.CancelledError:
                for j in jobs:
                    j.future.cancel()
                    j.done()
                raise
            except Exception as e:  # noqa: BLE001 - one model's bug must not stop its worker
                log.exception("%s failed on a batch of %d", self.model_id, len(jobs))
                results = [ModelFailed(f"The model {self.model_id} failed on this input ({e.__class__.__name__}).")] * len(jobs)
            for job, result in zip(jobs, results, strict=True):
                job.done()
                if job.future.done():
                    continue
                if isinstance(result, BaseException):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)

    async def _run(self, jobs: list[Job]) -> tuple[list[Job], list[Any]]:
        """``(the jobs run, their results)``: those of ``jobs`` whose caller still waits once the
        model is loaded (a load can take seconds; the others are answered by their deadline)."""
        # the loaded model is referenced only for the run: once evicted, its memory can go
        runner = (await self.pool.get(self.model_id)).runner
        jobs = _live(jobs)
        if not jobs:
            return [], []
        began, start = tracing.now(), time.monotonic()
        try:
            results = await asyncio.get_running_loop().run_in_executor(self.executor, self._run_batch, runner,
                                                                        [j.item for j in jobs])
        finally:
            tracing.record_batch([(j.trace, j.queued) for j in jobs], began, tracing.now(), self.model_id, len(jobs))
        if len(jobs) > 1 and self.refill:
            ended = time.monotonic()
            self._after = Refill(min(self.max_batch, len(jobs) + self.queue.qsize()),
                                 ended + min(self.refill, REFILL_SHARE * (ended - start)))
        return jobs, results

    def _run_batch(self, runner: Any, items: list[Any]) -> list[Any]:
        """Runs in the executor. Out of memory → :class:`OutOfMemory` (the worker then unloads)."""
        reason = None
        try:
            self._check_free_memory()
            return self._run_or_split(runner, items)
        except ExpertError:
            raise
        except BaseException as e:
            if not is_oom(e):
                raise
            reason = f"{e.__class__.__name__}: {e}"  # raised below, outside this block: no traceback
            # keeps the frames (and the model's tensors) alive
        del runner
        log.warning("%s ran out of memory on a batch of %d (%s); unloading it", self.model_id, len(items), reason)
        raise OutOfMemory(f"The server ran out of memory running {self.model_id}; the model was unloaded, "
                          "try a smaller input or again later.")

    def _run_or_split(self, runner: Any, items: list[Any]) -> list[Any]:
        """The results of the task on ``items`` in one call; when it raises (not out of memory),
        of each item alone: an item that fails gets its own :class:`ModelFailed` (one log line,
        no traceback) or the task's :class:`ExpertError`. Out of memory is raised."""
        self.stats.add(len(items))
        if len(items) == 1:
            return [self._run_one(runner, items[0], 0, 1)]
        try:
            return self.run(runner, items)
        except Exception as e:  # noqa: BLE001 - which input failed is found below
            if is_oom(e):
                raise
            name = e.__class__.__name__
        log.warning("%s failed on a batch of %d (%s); running its inputs one by one", self.model_id, len(items), name)
        self.stats.retried += 1
        return [self._run_one(runner, item, i, len(items)) for i, item in enumerate(items)]

    def _run_one(self, runner: Any, item: Any, index: int, size: int) -> Any:
        """The task's result for ``item`` alone, or the error its caller gets (out of memory is raised)."""
        try:
            return self.run(runner, [item])[0]
        except ExpertError as e:
            return e.with_traceback(None)  # its frames would keep the model and the input alive
        except Exception as e:  # noqa: BLE001 - this input's failure, answered to its caller alone
            if is_oom(e):
                raise
            log.warning("%s failed on input %d of a batch of %d: %s: %s", self.model_id, index + 1, size,
                        e.__class__.__name__, shown(str(e)))
            return ModelFailed(f"The model {self.model_id} failed on this input ({e.__class__.__name__}).")

    def _check_free_memory(self) -> None:
        if not self.min_free or not self.pool.device.startswith("cpu"):
            return
        free = memory.available_bytes()
        if free is not None and free < self.min_free:
            import torch

            raise torch.OutOfMemoryError(f"{format_size(free)} of RAM free, below the floor of {format_size(self.min_free)}")

    async def close(self) -> None:
        """Stop the worker; waiting jobs are cancelled."""
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        while not self.queue.empty():
            job = self.queue.get_nowait()
            job.future.cancel()
            job.done()
