"""The state one run's steps share (:class:`pipeline.core.Pipeline` runs them)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from .execution import ExecutionRun
from .llm import Usage
from .types import Request, RunRecord, Task


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
        """Fill in what every record carries at the end: stopped, usage and timings."""
        record = self.record
        record.stopped = self.stopped
        record.llm_calls = self.usage.calls
        record.http_attempts = self.usage.http_attempts
        record.timings_ms["total"] = (time.monotonic() - self.t0) * 1000
        record.timings_ms["cpu"] = (time.process_time() - self.cpu0) * 1000  # this process, all its threads
