"""Stop signals for the long-running front ends (Slack, Discord): the first SIGINT/SIGTERM asks for
a graceful stop, a second one for an immediate stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator

log = logging.getLogger(__name__)


class StopSignals:
    """What the process was asked: :attr:`stop` is set by the first SIGINT/SIGTERM (drain),
    :attr:`forced` by the second (stop at once)."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.forced = asyncio.Event()

    def received(self, sig: signal.Signals) -> None:
        """Note one signal (the handler installed by :meth:`installed`)."""
        if self.stop.is_set():
            log.warning("%s received again: stopping at once", sig.name)
            self.forced.set()
        else:
            log.info("%s received: draining (a second signal stops at once)", sig.name)
            self.stop.set()

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        """Handle SIGINT and SIGTERM on the running loop while inside (where the platform allows)."""
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.received, sig)
                installed.append(sig)
        try:
            yield self
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
