"""Signals handled on the event loop: :func:`on_signals` (every command that catches SIGINT or
SIGTERM), and :class:`StopSignals` for the long-running front ends (Slack, Discord): the first
SIGINT/SIGTERM asks for a graceful stop, a second one for an immediate stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def on_signals(callback: Callable[[signal.Signals], None], *signals: signal.Signals,
               once: bool = False) -> Iterator[list[signal.Signals]]:
    """While active, each of ``signals`` calls ``callback(signal)`` on the running event loop
    instead of interrupting. Yields the signals handled: none where the loop cannot catch them (not
    the main thread, Windows). ``once``: after the first signal, the next ones go where they went
    before.

    On exit (or after the first signal with ``once``) each signal goes back to the handler that was
    there (``asyncio.Runner``'s for SIGINT, which cancels the command's task: exit status 130), not
    to the one the loop's ``remove_signal_handler`` installs, Python's default for SIGINT: that one
    raises ``KeyboardInterrupt`` between any two bytecodes of the main thread, in an import too,
    and an import interrupted while it holds the interpreter's import lock leaves the other threads
    waiting for it forever (a ``run`` stopped while its pipeline loaded never exited)."""
    loop = asyncio.get_running_loop()
    handled: dict[signal.Signals, object] = {}

    def release() -> None:
        for sig, previous in handled.items():
            loop.remove_signal_handler(sig)
            if previous is not None:  # None: set outside Python, nothing to give back
                signal.signal(sig, previous)  # type: ignore[arg-type]

    def call(sig: signal.Signals) -> None:
        if once:
            release()
        callback(sig)

    for sig in signals:
        previous = signal.getsignal(sig)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, call, sig)
            handled[sig] = previous
    try:
        yield list(handled)
    finally:
        release()


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

    def installed(self) -> contextlib.AbstractContextManager[list[signal.Signals]]:
        """Handle SIGINT and SIGTERM on the running loop while inside (where the platform allows;
        :func:`on_signals`)."""
        return on_signals(self.received, signal.SIGINT, signal.SIGTERM)
