"""The platform-neutral progress of one run, folded from the pipeline's events.

The terminal, Discord and Slack all render this one model (each with its own icons, markup and
size limits), so they show the same stages and the same task states:

* stages: ``planning`` → ``executing`` (tasks running) → ``responding`` (the answer streams) →
  ``done`` | ``failed``; a run cut off from outside (shutdown, a crash) is marked ``stopped``;
* task states: ``waiting`` → ``running`` → ``done`` | ``failed`` | ``skipped``, and ``stopped``
  for a task still waiting or running when its run was stopped.

A failure reads the same everywhere too: :func:`user_sentence` and :func:`record_error` give the
sentence a user sees for an error or a failed record (a storage failure without the server's paths).

Pure: no I/O, no platform library; the clock is passed in (``time.monotonic()`` seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from bot.errors import StorageError
from bot.readiness import storage_sentence
from pipeline.errors import HuggingGPTError
from pipeline.types import (
    Done,
    Event,
    ModelSelected,
    Notice,
    PlanDiscarded,
    PlanReady,
    ReplanStarted,
    ResponseDelta,
    RunRecord,
    Task,
    TaskFailed,
    TaskFinished,
    TaskSkipped,
    TaskPlanned,
    TaskStarted,
)

Stage = Literal["planning", "executing", "responding", "done", "failed", "stopped"]
TaskState = Literal["waiting", "running", "done", "failed", "skipped", "stopped"]
FINAL_TASK_STATES: tuple[TaskState, ...] = ("done", "failed", "skipped", "stopped")

_RESULT_STATE: dict[str, TaskState] = {"ok": "done", "failed": "failed", "skipped": "skipped"}


def replan_sentence(event: ReplanStarted) -> str:
    """What users read when the controller is asked to re-plan: the round and why."""
    return f"Re-planning (round {event.round}): {event.reason.rstrip('.')}; asking the controller how to go on."


@dataclass
class TaskProgress:
    """One task as users see it.

    Attributes:
        task: the planned task.
        model: the model chosen or being tried (``None`` until selected).
        state: see the module docstring.
        error: the user's sentence when failed or skipped.
        started, finished: ``time.monotonic()`` seconds, when known.
    """

    task: Task
    model: str | None = None
    state: TaskState = "waiting"
    error: str | None = None
    started: float | None = None
    finished: float | None = None

    def seconds(self, now: float) -> float | None:
        """Seconds it ran (so far, while running), or ``None`` if it never started."""
        if self.started is None:
            return None
        return (self.finished if self.finished is not None else now) - self.started


@dataclass
class Progress:
    """The state of one run; feed every event to :meth:`apply`.

    Attributes:
        started: ``time.monotonic()`` when the run began, seconds.
        stage: see the module docstring.
        planned: whether task planning is done.
        tasks: task id → :class:`TaskProgress`, in plan order.
        answer: the answer text streamed so far.
        error: the user's sentence when the run failed or was stopped.
        elapsed: seconds from start to the end of the run (set by :class:`Done` or :meth:`stop`).
        notes: the run's :class:`~pipeline.types.Notice` sentences, each once, in order; a
            re-planning round adds its own (:func:`replan_sentence`), so every front end shows it.
        round: the planning round under way (1: the first plan; 2: the first re-plan ...).
    """

    started: float = field(default_factory=time.monotonic)
    stage: Stage = "planning"
    planned: bool = False
    tasks: dict[int, TaskProgress] = field(default_factory=dict)
    answer: str = ""
    error: str | None = None
    elapsed: float | None = None
    notes: list[str] = field(default_factory=list)
    round: int = 1

    @property
    def finished(self) -> bool:
        """Whether the run is over (done, failed or stopped)."""
        return self.stage in ("done", "failed", "stopped")

    def apply(self, event: Event, now: float | None = None) -> bool:
        """Fold ``event`` into the model.

        Args:
            event: any ``pipeline.types.Event``.
            now: ``time.monotonic()`` seconds (default: the clock).

        Returns:
            Whether what users see may have changed (a second answer delta does not change the stage).
        """
        now = time.monotonic() if now is None else now
        if self.finished:
            return False
        if isinstance(event, Notice):
            if event.text in self.notes:
                return False
            self.notes.append(event.text)
        elif isinstance(event, ReplanStarted):
            self.round = event.round
            self.notes.append(replan_sentence(event))
            self.stage = "planning"
        elif isinstance(event, (TaskPlanned, PlanDiscarded, PlanReady)):
            self._apply_plan(event)
        elif isinstance(event, (ModelSelected, TaskStarted)):
            return self._apply_task(event, now)
        elif isinstance(event, (TaskFinished, TaskFailed, TaskSkipped)):
            self._finish_task(event.result.task_id, event.result.status, event.result.model, event.result.error, now)
        elif isinstance(event, ResponseDelta):
            self.answer += event.text
            if self.stage == "responding":
                return False
            self.stage = "responding"
        elif isinstance(event, Done):
            self._apply_done(event.record, now)
        else:
            return False
        return True

    def _apply_plan(self, event: TaskPlanned | PlanDiscarded | PlanReady) -> None:
        if isinstance(event, TaskPlanned):  # the plan is still being written; this task starts
            self.tasks.setdefault(event.task.id, TaskProgress(event.task))
            self.stage = "executing"
        elif isinstance(event, PlanDiscarded):  # the early tasks were stopped; planning goes on
            for tid in event.task_ids:
                self.tasks.pop(tid, None)
            self.stage = "planning"
        else:
            self.planned = True
            for task in event.tasks:
                self.tasks.setdefault(task.id, TaskProgress(task))
            self.stage = "executing" if event.tasks else "responding"

    def _apply_task(self, event: ModelSelected | TaskStarted, now: float) -> bool:
        if isinstance(event, ModelSelected):
            line = self.tasks.get(event.selection.task_id)
            if line is None:
                return False
            line.model = event.selection.model
            return True
        line = self.tasks.get(event.task_id)
        if line is None:
            return False
        line.state, line.model = "running", event.model
        if line.started is None:
            line.started = now
        return True

    def _apply_done(self, record: RunRecord, now: float) -> None:
        """The final state from the run's record (tasks the events did not finish included)."""
        for task in record.tasks:
            self.tasks.setdefault(task.id, TaskProgress(task))
        self.planned = self.planned or bool(record.tasks)
        for tid, sel in record.selections.items():
            if tid in self.tasks and self.tasks[tid].model is None:
                self.tasks[tid].model = sel.model
        for tid, res in record.results.items():
            if tid in self.tasks and self.tasks[tid].state in ("waiting", "running"):
                self._finish_task(tid, res.status, res.model, res.error, now)
                if record.stopped and res.status == "failed":  # cut short by the user's Stop
                    self.tasks[tid].state = "stopped"
        for line in self.tasks.values():  # started early, then the run ended without them
            if line.state in ("waiting", "running"):
                line.state, line.finished = "stopped", now
        self.stage = "done" if record.answered or record.status == "awaiting approval" else "failed"
        self.error = record_error(record)
        total = record.timings_ms.get("total")
        self.elapsed = total / 1000 if total else now - self.started

    def _finish_task(self, task_id: int, status: str, model: str | None, error: str | None, now: float) -> None:
        line = self.tasks.get(task_id)
        if line is None:
            return
        line.state = _RESULT_STATE.get(status, "failed")
        line.model = model or line.model
        line.error = error
        line.finished = now

    def stop(self, sentence: str, now: float | None = None) -> None:
        """Mark the run as stopped from outside (shutdown, a crash): tasks still waiting or running
        become ``stopped`` and ``sentence`` is the user's explanation."""
        now = time.monotonic() if now is None else now
        for line in self.tasks.values():
            if line.state in ("waiting", "running"):
                line.state = "stopped"
                line.finished = now
        self.stage = "stopped"
        self.error = sentence
        self.elapsed = now - self.started

    def counts(self) -> dict[TaskState, int]:
        """How many tasks are in each state."""
        out: dict[TaskState, int] = {}
        for line in self.tasks.values():
            out[line.state] = out.get(line.state, 0) + 1
        return out


def user_sentence(error: HuggingGPTError) -> str:
    """The sentence a user sees for ``error``: the error's own, except for a storage failure,
    whose sentence names the operator's files; it becomes a path-free one
    (:func:`bot.readiness.storage_sentence`: full, busy, damaged, unavailable)."""
    return storage_sentence(error) if isinstance(error, StorageError) else error.user_message


def record_error(record: RunRecord) -> str | None:
    """The failure sentence of a run's record, as :func:`user_sentence` (``None`` when it has none)."""
    if isinstance(record.failure, StorageError):
        return storage_sentence(record.failure)
    return record.error
