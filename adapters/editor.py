"""One message edited in place as a run progresses, for every platform (Discord's status message,
Slack's ``chat.update``), within the platform's edit rate."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

from aiolimiter import AsyncLimiter

log = logging.getLogger(__name__)


class MessageEditor:
    """Keeps one message showing the newest text, editing it at most once per ``interval`` seconds
    and skipping intermediate texts that were superseded.

    :meth:`set` never waits: it records the newest text and a background task sends it.
    :meth:`close` sends the final text and stops the task. A failed edit is logged and not
    retried (the status is a courtesy: answers are posted separately).

    Args:
        edit: sends one edit (``async edit(text)``); any exception it raises is logged.
        text: the text the message was posted with.
        interval: minimum seconds between two edits of this message (Discord and Slack: about 1).
        limiter: an ``AsyncLimiter`` shared by all messages of the process (Slack's ``chat.update``
            budget: about 50 per minute, Tier 3), or ``None``.
        name: for log lines and the task name.

    Attributes:
        edits: edits sent so far.
    """

    def __init__(self, edit: Callable[[str], Awaitable[object]], text: str, *, interval: float = 1.0,
                 limiter: AsyncLimiter | None = None, name: str = "status") -> None:
        self._edit = edit
        self.interval = interval
        self.name = name
        self._limiter = limiter
        self._text = text
        self._sent = text
        self._last = time.monotonic()
        self._dirty = asyncio.Event()
        self._closing = False
        self.edits = 0
        self._task = asyncio.create_task(self._run(), name=f"edit-{name}")

    def set(self, text: str) -> None:
        """Make ``text`` the newest content; it is shown within ``interval`` seconds."""
        self._text = text
        if text != self._sent:
            self._dirty.set()

    async def close(self, text: str | None = None) -> None:
        """Show ``text`` (or the newest text) if not shown yet, then stop editing."""
        if text is not None:
            self._text = text
        self._closing = True
        self._dirty.set()
        await self._task

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._dirty.clear()
            text = self._text
            if text != self._sent:
                try:
                    async with AsyncExitStack() as stack:
                        if self._limiter is not None:
                            await stack.enter_async_context(self._limiter)
                        await self._edit(text)
                    self.edits += 1
                except Exception as e:  # noqa: BLE001 - logged; the next text may go through
                    log.warning("could not edit status message %s: %s", self.name, e)
                self._sent = text  # do not retry the same text forever
                self._last = time.monotonic()
            if self._closing and self._text == self._sent:
                return
