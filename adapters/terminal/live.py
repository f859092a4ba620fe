"""The run drawn live on a terminal (``hugginggpt chat``, and ``hugginggpt run`` on a terminal).

While a run goes on, one region is redrawn a few times a second (rich ``Live``): the stage with a
spinner and the seconds so far, one line per task with its state, model and seconds, and the
tail of the answer as it streams, rendered as Markdown. When the run ends the region is replaced
by what stays in the scrollback: the tasks with their final states and times, the whole answer as
Markdown, the generated files by path (and drawn inline where the terminal can,
:mod:`adapters.terminal_images`), and how long it took.

Everything a model wrote goes through :func:`adapters.terminal.printable` first, and links are
shown with their address (no hidden OSC 8 hyperlinks): an answer cannot retitle the window or
disguise where a link goes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from adapters.progress import Progress, TaskProgress
from pipeline.types import Done, Event, Notice, PlanDiscarded, ReplanStarted, RunRecord

from .lines import printable
from .images import Protocol, inline_image

_STATE_STYLE = {"waiting": "dim", "running": "yellow", "done": "green", "failed": "red", "skipped": "magenta",
                "stopped": "magenta"}
_STAGE_WORDS = {"planning": "Planning the tasks", "executing": "Running the tasks", "responding": "Writing the answer"}


def _seconds(s: float | None) -> str:
    return "" if s is None else f"{s:.1f} s"


def task_line(line: TaskProgress, now: float) -> Text:
    """One task as ``  [0] image-to-text  running on MODEL  3.2 s``, then the error (failed,
    skipped) or a one-line summary of the output (done)."""
    t = line.task
    out = Text(printable(f"  [{t.id}] {t.task}  "))
    state = line.state
    if state == "running" and line.model:
        out.append(printable(f"running on {line.model}"), style=_STATE_STYLE[state])
    elif state == "waiting" and t.dep:
        out.append(f"waiting for {', '.join(str(d) for d in t.dep)}", style="dim")
    else:
        out.append(state, style=_STATE_STYLE[state])
        if line.model and state == "done":
            out.append(printable(f" by {line.model}"), style="dim")
    seconds = _seconds(line.seconds(now))
    if seconds:
        out.append(f"  {seconds}", style="cyan")
    if line.error and state in ("failed", "skipped", "stopped"):
        out.append(printable(f": {line.error}"))
    return out


class _Tail:
    """The last ``height`` lines of a renderable (the newest part of a streaming answer)."""

    def __init__(self, renderable: RenderableType, height: int) -> None:
        self.renderable, self.height = renderable, height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-self.height :]:
            yield from line
            yield Segment.line()


def answer_markdown(text: str) -> Markdown:
    """An answer as rich Markdown: terminal controls removed, links shown with their address."""
    return Markdown(printable(text), hyperlinks=False)


class LiveRenderer:
    """Draws a run on ``console`` (see the module docstring); one instance serves every turn of a
    chat.

    Args:
        console: a rich console writing to the terminal.
        images: the terminal's inline-image protocol (``None``: paths only).
        err: console for the error sentence of a failed run (default: ``console``).
        clock: ``time.monotonic``-like seconds, for the seconds shown.

    Attributes:
        progress: the current run's progress.
    """

    def __init__(self, console: Console, images: Protocol | None = None, err: Console | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.err = err or console
        self.images = images
        self.clock = clock
        self.progress = Progress()
        self._live: Live | None = None

    # -- the live region ---------------------------------------------------------------------

    def _view(self) -> RenderableType:
        p, now = self.progress, self.clock()
        parts: list[RenderableType] = []
        words = _STAGE_WORDS.get(p.stage)
        if words:
            parts.append(Spinner("dots", Text(f"{words}…  {_seconds(now - p.started)}", style="bold")))
        parts.extend(task_line(line, now) for line in list(p.tasks.values()))
        if p.answer:
            room = max(3, self.console.size.height - len(parts) - 2)
            parts.append(Text())
            parts.append(_Tail(answer_markdown(p.answer), room))
        return Group(*parts)

    def _start(self) -> Live:
        if self._live is None:
            self.progress = Progress(started=self.clock())
            self._live = Live(console=self.console, get_renderable=self._view, refresh_per_second=8,
                              transient=True, redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        return self._live

    def render(self, event: Event) -> None:
        """Fold ``event`` into the progress and redraw; at :class:`Done`, print the outcome."""
        live = self._start()
        changed = self.progress.apply(event, self.clock())
        if isinstance(event, Notice) and changed:
            self.console.print(Text(printable(f"({event.text})"), style="dim"))
        elif isinstance(event, ReplanStarted) and changed:
            self.console.print(Text(printable(f"({self.progress.notes[-1]})"), style="yellow"))
        elif isinstance(event, PlanDiscarded):
            self.console.print(Text(printable(f"(The finished plan was invalid: {event.problem} The tasks started "
                                              "early were stopped; asking the controller to fix it.)"), style="yellow"))
        if isinstance(event, Done):
            self.close()
            self.finish(event.record)
        elif changed:
            live.refresh()

    def say(self, sentence: str) -> None:
        """Print a sentence of the front end's own above the live region (``Stopping this run…``)."""
        self.console.print(Text(sentence, style="yellow"))

    def notice(self, sentence: str) -> None:
        """Say what an answer lacks (:func:`adapters.turn.notice_of`) under the answer."""
        self.console.print(Text(printable(f"Note: {sentence}"), style="yellow"))

    def error(self, sentence: str) -> None:
        """Say why a turn has no answer (a refusal, a crash), as a failed run's error."""
        self.close()
        self.err.print(Text(printable(f"Error: {sentence}"), style="red"))

    def close(self) -> None:
        """Stop redrawing (the region is cleared); safe to call twice."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- what stays --------------------------------------------------------------------------

    def finish(self, record: RunRecord) -> None:
        """Print the tasks, the answer (Markdown), the files and the time the run took."""
        p, now = self.progress, self.clock()
        for line in p.tasks.values():
            self.console.print(task_line(line, now))
        if p.tasks:
            self.console.print()
        if record.answered and record.response:
            self.console.print(answer_markdown(record.response))
        elif not record.answered:
            self.err.print(Text(printable(f"Error: {record.error or ''}"), style="red"))
        self._files(record)
        took = p.elapsed if p.elapsed is not None else now - p.started
        word = "Stopped" if record.stopped else ("Done" if record.answered else "Failed")
        self.console.print(Text(f"{word} in {took:.1f} s.", style="dim"))

    def _files(self, record: RunRecord) -> None:
        if not record.files:
            return
        self.console.print()
        self.console.print(Text("Files:", style="bold"))
        for f in record.files:
            self.console.print(Text(printable(f"  {f.id} ({f.kind}, {f.description or f.mime}): {f.path}")),
                               soft_wrap=True)  # a path broken across lines cannot be copied
            if f.kind == "image" and self.images is not None:
                self._draw(Path(f.path))

    def _draw(self, path: Path) -> None:
        sequence = inline_image(path, self.images) if self.images else None
        if sequence is None:
            return
        self.console.file.flush()
        self.console.file.write(sequence + "\n")
        self.console.file.flush()


