"""One run of :class:`pipeline.core.Pipeline`: the state its steps share, and the two waits they
share while the user may press Stop (the run's event queue, the answer's stream)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from .execution import ExecutionRun
from .llm import Usage
from .cost import Cost, Pricing
from .types import Event, Request, RunRecord, Task

PlanGate = Callable[[tuple[Task, ...], Cost | None], Awaitable[bool]]
"""Asked with a plan's tasks (or a re-planning round's further tasks) and their estimate (``None``
without a price table) before any of them runs: a budget reserves the estimate, an approval
policy decides whether a person must say yes first. It returns ``True`` to hold the first plan for
that person (the run ends with status ``"awaiting approval"``, nothing run; a re-planning round
runs either way), ``False`` to run, or raises :class:`pipeline.errors.HuggingGPTError` with the
sentence that refuses the tasks."""


@dataclass
class RunState:
    """What the steps of one :meth:`pipeline.core.Pipeline.run` share."""

    request: Request
    stop: asyncio.Event | None
    loop: asyncio.AbstractEventLoop
    end: float
    """The deadline, in the loop's clock."""
    record: RunRecord
    usage: Usage = field(default_factory=Usage)
    available: frozenset[str] = frozenset()
    tasks: list[Task] = field(default_factory=list)
    run: ExecutionRun | None = None
    """The execution the plan's tasks joined; later rounds' tasks join it too."""
    down: list[str] = field(default_factory=list)
    """Sentences about backends that could not be used for this run (an expert server that could
    not be reached, an MCP server that did not start)."""
    pricing: Pricing | None = None
    """The prices the run is estimated and charged with (``None``: no estimate, no cost)."""
    gate: PlanGate | None = None
    """Asked before a plan's tasks run (:data:`PlanGate`); with one, tasks wait for the whole plan
    (no eager start while it is written)."""
    stage: str = "task planning"
    stopped_while_writing: bool = False
    t0: float = field(default_factory=time.monotonic)
    cpu0: float = field(default_factory=time.process_time)

    @property
    def stopped(self) -> bool:
        """Whether the user stopped the run."""
        return self.stop is not None and self.stop.is_set()

    def left(self) -> float:
        """Seconds until the deadline (negative once it passed)."""
        return self.end - self.loop.time()

    def close_record(self) -> None:
        """Fill in what every record carries at the end: stopped, usage, cost and timings."""
        record = self.record
        if self.pricing is not None:
            record.cost = self.pricing.actual(record, self.usage)
        record.stopped = self.stopped
        record.llm_calls = self.usage.calls
        record.http_attempts = self.usage.http_attempts
        record.prompt_tokens, record.completion_tokens = self.usage.prompt_tokens, self.usage.completion_tokens
        if self.run is not None and self.run.tasks:
            record.timings_ms["selection"] = self.run.selection_seconds * 1000
        record.timings_ms["total"] = (time.monotonic() - self.t0) * 1000
        record.timings_ms["cpu"] = (time.process_time() - self.cpu0) * 1000  # this process, all its threads


async def events_until(
    queue: asyncio.Queue[Event], job: asyncio.Task, stop: asyncio.Event | None = None
) -> AsyncIterator[Event]:
    """Events put on ``queue`` until ``job`` is done and the queue is empty; if ``stop`` is set
    first, ``job`` is cancelled (awaited) and the events so far are still yielded."""
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        while not job.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait([f for f in (getter, job, stopping) if f is not None], return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
            if stopping is not None and stopping.done() and not job.done():
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)
                while not queue.empty():
                    yield queue.get_nowait()
                return
    finally:
        if stopping is not None:
            stopping.cancel()


async def next_or_stop(stream: AsyncIterator[str], timeout: float, stop: asyncio.Event | None) -> str | None:
    """The stream's next delta; ``None`` when ``stop`` is set first.

    Raises:
        StopAsyncIteration: the stream ended.
        TimeoutError: ``timeout`` seconds passed first.
    """
    if stop is None:
        return await asyncio.wait_for(anext(stream), timeout=max(0.0, timeout))
    if stop.is_set():
        return None
    getting = asyncio.ensure_future(anext(stream))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({getting, stopping}, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # cancelled (shutdown): the stream's step ends here, so that it can be closed
        getting.cancel()
        await asyncio.gather(getting, return_exceptions=True)
        raise
    finally:
        stopping.cancel()
    if getting in done:
        return getting.result()
    getting.cancel()
    await asyncio.gather(getting, return_exceptions=True)
    if stopping in done:
        return None
    raise TimeoutError
