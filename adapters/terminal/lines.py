"""Pipeline events as lines of text (``hugginggpt run`` and ``chat`` when the output is not a
terminal); :mod:`adapters.terminal.live` draws the same progress model
(:class:`adapters.progress.Progress`) on a terminal."""

from __future__ import annotations

import re
import sys
import textwrap
from typing import AbstractSet, TextIO

from adapters.progress import Progress, replan_sentence
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


_ESCAPE_SEQUENCE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase
    r"|\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, hyperlinks, clipboard
    r"|[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|[@-Z\\-_]?)"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x9c\x1b]*(?:\x07|\x9c)?"  # 8-bit DCS, SOS, OSC, PM, APC
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe for a terminal: escape sequences (CSI, OSC, DCS ... ECMA-48) and control
    characters (C0 but newline and tab, DEL, C1) removed. Model output and user text go through
    this before they are printed: an answer must not retitle the window, rewrite the screen or
    write to the clipboard."""
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))


def summary_of(text: str, width: int = 100) -> str:
    """One line of at most ``width`` characters, cut at a word boundary with "…"."""
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" …")


def describe_task(t: Task) -> str:
    """One plan line: ``  [1] image-classification  image='<resource>-0'  (after 0)``."""
    args = ", ".join(f"{k}={_short(v)}" for k, v in t.args.items())
    after = f"  (after {', '.join(str(d) for d in t.dep)})" if t.dep else ""
    return f"  [{t.id}] {t.task}  {args}{after}"


def describe_plan(event: PlanReady, shown: AbstractSet[int] = frozenset(), round: int = 1) -> list[str]:
    """Lines for a plan: a header, then ``  [0] object-detection  image=image-1`` per task not in
    ``shown`` (tasks already printed while the plan streamed), ``after 0`` for dependencies; a
    re-planning round's header says which round it is (``Plan (round 2): 1 more task``)."""
    if not event.tasks:
        return ["Plan: no expert task needed; the controller answers directly."]
    n = len(event.tasks)
    if round > 1:
        return [f"Plan (round {round}): {n} more task{'s' if n != 1 else ''}"] + [describe_task(t) for t in event.tasks]
    lines = [f"Plan: {n} task{'s' if n != 1 else ''}"]
    return lines + [describe_task(t) for t in event.tasks if t.id not in shown]


def _short(v: str, n: int = 48) -> str:
    v = v.replace("\n", " ")
    return repr(v if len(v) <= n else v[: n - 1] + "…")


_STATE_COLOUR = {"done": "32", "failed": "31", "skipped": "33", "stopped": "33"}


class TerminalRenderer:
    """Writes progress to ``out``, one line per change of the run's progress
    (:class:`adapters.progress.Progress`, the model Discord and Slack render too), and the streamed
    answer with its list of files to ``answer``.

    Args:
        out: stream for progress.
        color: use ANSI colours (default: when ``out`` is a terminal).
        err: stream for the error sentence of a failed run.
        answer: stream for the answer and its files (default: ``out``). ``hugginggpt run`` with
            its output redirected passes stdout here and stderr as ``out``, so the file it writes
            holds only the answer.

    Attributes:
        progress: the run's progress so far.
    """

    def __init__(self, out: TextIO = sys.stdout, color: bool | None = None, err: TextIO | None = None,
                 answer: TextIO | None = None) -> None:
        self.out = out
        self.answer = answer or out
        self.err = err or sys.stderr
        self.color = out.isatty() if color is None else color
        self.progress = Progress()
        self._early: set[int] = set()

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def write(self, line: str = "", stream: TextIO | None = None) -> None:
        stream = stream or self.out
        stream.write(line + "\n")
        stream.flush()

    def say(self, sentence: str) -> None:
        """Print one sentence of the front end's own (``Stopping this run…``) with the progress."""
        self.write(f"\n{sentence}")

    def notice(self, sentence: str) -> None:
        """Say what an answer lacks (:func:`adapters.turn.notice_of`), next to the error sentences."""
        self.write(printable(f"Note: {sentence}"), self.err)

    def error(self, sentence: str) -> None:
        """Say why a turn has no answer (a refusal, a crash), where failed runs say theirs."""
        self.write(printable(f"Error: {sentence}"), self.err)

    def close(self) -> None:
        """Forget a run that ended without :class:`Done` (abandoned): the next run starts afresh."""
        self.progress = Progress()
        self._early = set()

    def render(self, event: Event) -> None:
        """Fold ``event`` into the progress and print what changed."""
        before = self.progress.stage
        if not self.progress.apply(event) and not isinstance(event, ResponseDelta):
            return
        p = self.progress
        if isinstance(event, Notice):
            self.write(self._c("2", printable(f"({event.text})")))
        elif isinstance(event, TaskPlanned):  # the plan is still being written; this task starts now
            if not self._early:
                self.write(self._c("1", "Plan (still being written; tasks start as they arrive):"))
            self._early.add(event.task.id)
            self.write(printable(describe_task(event.task)))
        elif isinstance(event, PlanDiscarded):
            self._early.clear()
            self.write(self._c("33", printable(f"(The finished plan was invalid: {event.problem} "
                                               "The tasks started early were stopped; asking the controller to fix it.)")))
        elif isinstance(event, ReplanStarted):
            self.write(self._c("33", printable(f"({replan_sentence(event)})")))
        elif isinstance(event, PlanReady):
            for line in describe_plan(event, self._early, p.round):
                self.write(self._c("1", line) if line.startswith("Plan") else printable(line))
        elif isinstance(event, ModelSelected):
            s = event.selection
            self.write(printable(f"  [{s.task_id}] model {s.model} ({s.strategy}: {s.reason})"))
        elif isinstance(event, TaskStarted):
            self.write(printable(f"  [{event.task_id}] {p.tasks[event.task_id].state} on {event.model}"))
        elif isinstance(event, (TaskFinished, TaskFailed, TaskSkipped)):
            line = p.tasks.get(event.result.task_id)
            if line is None:
                return
            r = event.result
            if line.state == "done":
                summary = summary_of(printable(r.output.text or "")) if r.output else ""
                files = ", ".join(f.id for f in r.output.files) if r.output and r.output.files else ""
                extra = f" → {summary}" if summary else ""
                extra += f" [{files}]" if files else ""
            else:
                extra = f": {printable(line.error or '')}"
            self.write(self._c(_STATE_COLOUR[line.state], f"  [{r.task_id}] {line.state}") + extra)
        elif isinstance(event, ResponseDelta):
            if before != "responding" and self.answer is self.out:
                self.write()
            self.answer.write(printable(event.text))
            self.answer.flush()
        elif isinstance(event, Done):
            if before == "responding":
                self.write(stream=self.answer)
            self.finish(event.record)
            self.progress = Progress()  # ready for the next turn (chat)
            self._early = set()

    def finish(self, record: RunRecord) -> None:
        """The error sentence or the list of generated files."""
        if not record.answered:
            self.error(record.error or "")
        if record.files:
            self.write(stream=self.answer)
            self.write("Files:", self.answer)
            for f in record.files:
                self.write(printable(f"  {f.id} ({f.kind}, {f.description or f.mime}): {f.path}"), self.answer)
