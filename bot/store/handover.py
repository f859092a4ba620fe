"""The one channel by which the store's findings about gone processes reach the front ends.

When a process sharing the store dies, another one finds its work: turns it left running (marked
interrupted, at start and at each heartbeat) and platform deliveries it took but never started
(taken over at each heartbeat). The store publishes both here; the front ends subscribe. The
service owns the channel (``Service.create`` builds it and hands it to the store), so the store
never calls into a front end and nothing is written onto the store.

Delivery to subscribers is best effort: the turns are already marked and the deliveries already
owned by this process whatever a subscriber does; a subscriber's exception is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..incoming import ConversationKey

log = logging.getLogger(__name__)

Interrupted = list[tuple[ConversationKey, int]]
"""Turns marked interrupted: ``[(conversation key, turn index)]``."""
Adopted = list[tuple[str, str]]
"""Deliveries taken over: ``[(delivery key, payload)]``."""


class Handover:
    """The channel (see the module docstring): interrupted turns to every subscriber, taken-over
    deliveries to the one front end that runs them.

    Interrupted turns published before the first subscriber came (the store marks them while
    opening, before any front end is up) are kept and passed to it when it subscribes.
    """

    def __init__(self) -> None:
        self._interrupted: list[Callable[[Interrupted], Awaitable[None]]] = []
        self._early: Interrupted = []
        self._redelivery: tuple[str, Callable[[Adopted], Awaitable[None]]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def on_interrupted(self, listener: Callable[[Interrupted], Awaitable[None]]) -> None:
        """Subscribe ``listener`` to turns of gone processes marked interrupted (so the front end
        can tell those threads; each picks the keys of its own platform). Turns marked before
        the first subscriber are passed to it at once (in a task of the running loop)."""
        self._interrupted.append(listener)
        early, self._early = self._early, []
        if early:
            task = asyncio.get_running_loop().create_task(_call(listener, early, "tell threads about interrupted turns"))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def on_redelivery(self, prefix: str, listener: Callable[[Adopted], Awaitable[None]]) -> None:
        """Have this process take over the deliveries of gone processes whose key starts with
        ``prefix`` (``"slack:"``: the front end it runs) and pass them to ``listener`` to run.
        One subscriber per process; without one, no delivery is taken over."""
        self._redelivery = (prefix, listener)

    @property
    def delivery_prefix(self) -> str | None:
        """The key prefix of the deliveries to take over, or ``None`` (nobody runs them)."""
        return self._redelivery[0] if self._redelivery else None

    async def interrupted(self, told: Interrupted) -> None:
        """Publish turns marked interrupted (the store calls it)."""
        if not told:
            return
        if not self._interrupted:
            self._early.extend(told)
            return
        for listener in list(self._interrupted):
            await _call(listener, told, "tell threads about interrupted turns")

    async def redelivered(self, where: str, adopted: Adopted) -> None:
        """Publish deliveries taken over from gone processes (the store calls it)."""
        if not adopted or self._redelivery is None:
            return
        log.warning("%s: took over %d delivery(ies) of gone processes", where, len(adopted))
        await _call(self._redelivery[1], adopted, "run the deliveries of gone processes")

    async def close(self) -> None:
        """Wait for deliveries to early subscribers still running."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _call(listener: Callable[[list], Awaitable[None]], items: list, what: str) -> None:
    try:
        await listener(items)
    except Exception:  # noqa: BLE001 - best effort; the store's work is done either way
        log.exception("could not %s (%d)", what, len(items))
