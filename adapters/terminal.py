"""Terminal front end: renders pipeline events as lines (``hugginggpt run`` and ``chat``)."""

from __future__ import annotations

import sys
from typing import TextIO

from bot.progress import Progress
from pipeline.types import (
    Done,
    Event,
    ModelSelected,
    PlanReady,
    ResponseDelta,
    RunRecord,
    TaskFailed,
    TaskFinished,
    TaskSkipped,
    TaskStarted,
)


def describe_plan(event: PlanReady) -> list[str]:
    """Lines for a plan: ``  [0] object-detection  image=image-1`` and ``after 0`` for deps."""
    if not event.tasks:
        return ["Plan: no expert task needed; the controller answers directly."]
    lines = [f"Plan: {len(event.tasks)} task{'s' if len(event.tasks) != 1 else ''}"]
    for t in event.tasks:
        args = ", ".join(f"{k}={_short(v)}" for k, v in t.args.items())
        after = f"  (after {', '.join(str(d) for d in t.dep)})" if t.dep else ""
        lines.append(f"  [{t.id}] {t.task}  {args}{after}")
    return lines


def _short(v: str, n: int = 48) -> str:
    v = v.replace("\n", " ")
    return repr(v if len(v) <= n else v[: n - 1] + "…")


_STATE_COLOUR = {"done": "32", "failed": "31", "skipped": "33", "stopped": "33"}


class TerminalRenderer:
    """Writes progress and the streamed answer to ``out``, one line per change of the run's
    progress (:class:`bot.progress.Progress`, the model Discord and Slack render too).

    Args:
        out: stream for progress and the answer.
        color: use ANSI colours (default: when ``out`` is a terminal).
        err: stream for the error sentence of a failed run.

    Attributes:
        progress: the run's progress so far.
    """

    def __init__(self, out: TextIO = sys.stdout, color: bool | None = None, err: TextIO | None = None) -> None:
        self.out = out
        self.err = err or sys.stderr
        self.color = out.isatty() if color is None else color
        self.progress = Progress()

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def write(self, line: str = "") -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def render(self, event: Event) -> None:
        """Fold ``event`` into the progress and print what changed."""
        before = self.progress.stage
        if not self.progress.apply(event) and not isinstance(event, ResponseDelta):
            return
        p = self.progress
        if isinstance(event, PlanReady):
            for line in describe_plan(event):
                self.write(self._c("1", line) if line.startswith("Plan") else line)
        elif isinstance(event, ModelSelected):
            s = event.selection
            self.write(f"  [{s.task_id}] model {s.model} ({s.strategy}: {s.reason})")
        elif isinstance(event, TaskStarted):
            self.write(f"  [{event.task_id}] {p.tasks[event.task_id].state} on {event.model}")
        elif isinstance(event, (TaskFinished, TaskFailed, TaskSkipped)):
            line = p.tasks.get(event.result.task_id)
            if line is None:
                return
            r = event.result
            if line.state == "done":
                summary = (r.output.text or "").replace("\n", " ") if r.output else ""
                files = ", ".join(f.id for f in r.output.files) if r.output and r.output.files else ""
                extra = f" → {summary[:100]}" if summary else ""
                extra += f" [{files}]" if files else ""
            else:
                extra = f": {line.error}"
            self.write(self._c(_STATE_COLOUR[line.state], f"  [{r.task_id}] {line.state}") + extra)
        elif isinstance(event, ResponseDelta):
            if before != "responding":
                self.write()
            self.out.write(event.text)
            self.out.flush()
        elif isinstance(event, Done):
            if before == "responding":
                self.write()
            self.finish(event.record)
            self.progress = Progress()  # ready for the next turn (chat)

    def finish(self, record: RunRecord) -> None:
        """The error sentence or the list of generated files."""
        if record.status == "error":
            self.err.write(f"Error: {record.error}\n")
            self.err.flush()
        if record.files:
            self.write()
            self.write("Files:")
            for f in record.files:
                self.write(f"  {f.id} ({f.kind}, {f.description or f.mime}): {f.path}")
