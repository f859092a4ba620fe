"""Waiting on a run's event queue and on the answer's stream while the user may press Stop:
the two waits :class:`pipeline.core.Pipeline` steps share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from .types import Event


async def events_until(
    queue: asyncio.Queue[Event], job: asyncio.Task, stop: asyncio.Event | None = None
) -> AsyncIterator[Event]:
    """Events put on ``queue`` until ``job`` is done and the queue is empty; if ``stop`` is set
    first, ``job`` is cancelled (awaited) and the events so far are still yielded."""
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        while not job.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait([f for f in (getter, job, stopping) if f is not None], return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
            if stopping is not None and stopping.done() and not job.done():
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)
                while not queue.empty():
                    yield queue.get_nowait()
                return
    finally:
        if stopping is not None:
            stopping.cancel()


async def next_or_stop(stream: AsyncIterator[str], timeout: float, stop: asyncio.Event | None) -> str | None:
    """The stream's next delta; ``None`` when ``stop`` is set first.

    Raises:
        StopAsyncIteration: the stream ended.
        TimeoutError: ``timeout`` seconds passed first.
    """
    if stop is None:
        return await asyncio.wait_for(anext(stream), timeout=max(0.0, timeout))
    if stop.is_set():
        return None
    getting = asyncio.ensure_future(anext(stream))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({getting, stopping}, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if getting in done:
        return getting.result()
    getting.cancel()
    await asyncio.gather(getting, return_exceptions=True)
    if stopping in done:
        return None
    raise TimeoutError
