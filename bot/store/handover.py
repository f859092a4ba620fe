"""What a store does after finding the work of a gone process (both stores): tell the front end
which threads' turns it marked interrupted, and hand it the deliveries it took over. Both are best
effort: the turns are already marked and the deliveries owned by this process whatever happens.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..incoming import ConversationKey

log = logging.getLogger(__name__)


async def tell_interrupted(find: Callable[[str], Awaitable[ConversationKey | None]],
                           listener: Callable[[list[tuple[ConversationKey, int]]], Awaitable[Any]] | None,
                           marked: list[tuple[str, int]]) -> None:
    """Pass ``marked`` (``(conversation id, turn)``) to ``listener`` with their conversation keys
    (looked up with ``find``; conversations deleted meanwhile are left out)."""
    if not marked or listener is None:
        return
    told = []
    for cid, idx in marked:
        key = await find(cid)
        if key is not None:
            told.append((key, idx))
    try:
        await listener(told)
    except Exception:  # noqa: BLE001 - telling the threads is best effort
        log.exception("could not tell threads about interrupted turns")


async def run_adopted(where: str, listener: Callable[[list[tuple[str, str]]], Awaitable[Any]],
                      adopted: list[tuple[str, str]]) -> None:
    """Pass deliveries taken over from gone processes (``(key, payload)``) to ``listener``."""
    if not adopted:
        return
    log.warning("%s: took over %d delivery(ies) of gone processes", where, len(adopted))
    try:
        await listener(adopted)
    except Exception:  # noqa: BLE001 - logged; the rows stay owned by this process
        log.exception("could not run the deliveries of gone processes")
