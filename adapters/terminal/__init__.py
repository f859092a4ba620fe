"""The terminal front end: ``hugginggpt run`` and ``hugginggpt chat``.

:mod:`.chat` is the conversation loop, :mod:`.files` reads the files a user names, :mod:`.lines`
renders a run as lines, :mod:`.live` draws it on a terminal with :mod:`.images` for inline
pictures, and :mod:`.prompt` is the chat's line editor. :func:`terminal_renderer` picks the
renderer (importing :mod:`.live`, and rich, only for a terminal); :class:`TerminalView` shows one
turn followed by :func:`adapters.turn.follow` with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TextIO

from adapters.progress import Progress
from adapters.signals import on_signals
from bot.approval import NO_TERMINAL, ApprovalNeeded
from bot.errors import InputError
from pipeline.types import Done, Event, RunRecord

from .lines import TerminalRenderer

if TYPE_CHECKING:
    from adapters.turn import Outcome

    from .live import LiveRenderer


def terminal_renderer(answer: TextIO, progress: TextIO, env: Mapping[str, str]) -> LiveRenderer | TerminalRenderer:
    """The renderer for a command whose answer goes to ``answer`` and whose progress goes to
    ``progress``.

    Args:
        answer: the answer's stream (stdout).
        progress: the progress stream when ``answer`` is not a terminal (stderr for ``run``).
        env: the environment, to recognise the terminal's inline-image protocol
            (:func:`adapters.terminal.images.image_protocol`).

    Returns:
        :class:`adapters.terminal.live.LiveRenderer` when ``answer`` is a terminal (imported only
        then); else a :class:`adapters.terminal.lines.TerminalRenderer` writing progress to
        ``progress`` and the answer with its files alone to ``answer``.
    """
    if not answer.isatty():
        return TerminalRenderer(progress, answer=answer)
    from rich.console import Console

    from .images import image_protocol
    from .live import LiveRenderer

    return LiveRenderer(Console(file=answer), images=image_protocol(env), err=Console(file=sys.stderr))


class TerminalView:
    """The terminal's :class:`adapters.turn.TurnView`: the renderer draws the events as they come
    and, at the end, the answer, its files and the notice or error sentence (in that order).

    Args:
        renderer: :func:`terminal_renderer`'s renderer (or a :class:`TerminalRenderer`).
        show_progress: draw the events (``False``: ``run --json`` without ``-v``: only a failure
            is said, on stderr).
        say_refusal: say a refusal's sentence (``False`` where the command re-raises the error, so
            its error handling says it once, with its exit status).
        say_error: says a refusal's or a crash's sentence (default: the renderer's error stream;
            the chat writes it where it talks).
    """

    def __init__(self, renderer: LiveRenderer | TerminalRenderer, *, show_progress: bool = True,
                 say_refusal: bool = True, say_error: Callable[[str], None] | None = None) -> None:
        self.renderer, self.show_progress, self.say_refusal = renderer, show_progress, say_refusal
        self.say_error = say_error or renderer.error
        self.waiting: ApprovalNeeded | None = None
        """The plan of a turn that waits for approval (:mod:`bot.approval`), once it said so."""

    async def progress(self, progress: Progress, event: Event) -> None:
        """Draw ``event`` (the renderer keeps its own drawing state)."""
        if isinstance(event, ApprovalNeeded):
            self.waiting = event
        elif self.show_progress:
            self.renderer.render(event)

    async def answer(self, record: RunRecord, progress: Progress) -> None:
        """Nothing yet: the renderer draws the answer at the end, with the run's last state."""

    async def files(self, record: RunRecord) -> None:
        """Nothing yet: the renderer lists the files under the answer."""

    async def notice(self, sentence: str, outcome: Outcome) -> None:
        """Nothing yet: said under the answer by :meth:`end`."""

    async def end(self, outcome: Outcome, progress: Progress) -> None:
        """The answer, files and notice, or the failure's sentence; a cancelled turn is only
        cleared (the command says how it was abandoned)."""
        record = outcome.record
        if outcome.moment == "awaiting":  # the command asks y/N next (ask_approval)
            self.renderer.close()
            return
        if record is not None:
            if self.show_progress:
                self.renderer.render(Done(record))
            elif not record.answered:
                self.renderer.finish(record)
            if outcome.answered and outcome.sentence:
                self.renderer.notice(outcome.sentence)
            return
        self.renderer.close()
        if outcome.sentence and outcome.moment != "restarted" and (self.say_refusal or outcome.moment != "refused"):
            self.say_error(outcome.sentence)


def on_ctrl_c(handler: Callable[[], None], *, once: bool = False) -> contextlib.AbstractContextManager[object]:
    """While active, Ctrl-C (SIGINT) calls ``handler`` on the event loop instead of interrupting;
    where signals cannot be caught (not the main thread), nothing changes. ``once``: after the
    first Ctrl-C, the next ones go where they went before (:func:`adapters.signals.on_signals`)."""
    return on_signals(lambda _sig: handler(), signal.SIGINT, once=once)


async def ask_approval(waiting: ApprovalNeeded, *, yes: bool, stdin: TextIO, out: TextIO) -> bool:
    """Ask on the terminal whether to run a plan that waits for approval: its steps and estimate,
    then ``Run this plan? [y/N]`` (anything but y or yes is no).

    Args:
        waiting: the plan (:class:`bot.approval.ApprovalNeeded`).
        yes: ``--yes``: approved without asking.
        stdin, out: where to ask.

    Raises:
        InputError: no terminal to ask on and no ``--yes`` (:data:`bot.approval.NO_TERMINAL`).
    """
    if yes:
        return True
    if not stdin.isatty():
        raise InputError(NO_TERMINAL)
    print(waiting.text(), file=out, flush=True)
    answer = await asyncio.to_thread(_read_answer, stdin, out)
    return answer.strip().lower() in ("y", "yes")


def _read_answer(stdin: TextIO, out: TextIO) -> str:
    print("Run this plan? [y/N] ", end="", file=out, flush=True)
    # a line editor's reads through an event loop may have left the terminal non-blocking (uvloop's
    # add_reader does, as libuv's uv_poll_init): readline would then return before the answer
    os.set_blocking(stdin.fileno(), True)
    return stdin.readline()
