"""Runs in flight: what the Stop button, shutdown and the status message share about one run."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from adapters.progress import Progress

from adapters.editor import MessageEditor


def new_run_id() -> str:
    """A fresh run id: 16 lower-case hex digits (64 random bits), for the Stop button's ``custom_id``."""
    return secrets.token_hex(8)


@dataclass
class LiveRun:
    """One run in flight.

    Attributes:
        requester: Discord user id of whoever asked (the only one, with members who may manage
            messages, allowed to press Stop).
        progress: the run's progress (what the status message shows).
        run_id: hex id carried by the Stop button's ``custom_id``.
        stop: set to stop the run (the message's ``stop``, :class:`bot.incoming.Message`).
        stopped_by: display name of whoever pressed Stop, once pressed.
        pressed_at: ``time.monotonic()`` of the Stop press (seconds), for the log and benchmarks.
        press: the Stop press's interaction once answered: the final state is shown through it
            (its own rate-limit bucket, not throttled like the channel edits), so a stopped run
            shows as stopped within a second of the press.
        editor: the status message's editor, once posted.
        task: the asyncio task running it (``None`` until spawned).
        started: ``time.monotonic()`` at creation, seconds.
    """

    requester: int
    progress: Progress = field(default_factory=Progress)
    run_id: str = field(default_factory=new_run_id)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    stopped_by: str | None = None
    pressed_at: float | None = None
    press: Any = None
    editor: MessageEditor | None = None
    task: asyncio.Task[Any] | None = None
    started: float = field(default_factory=time.monotonic)

    def request_stop(self, who: str) -> bool:
        """Ask the run to stop on behalf of ``who`` (a display name).

        Returns:
            ``False`` if it was already asked to stop or has finished.
        """
        if self.stop.is_set() or self.progress.finished:
            return False
        self.stopped_by = who
        self.pressed_at = time.monotonic()
        self.stop.set()
        return True
