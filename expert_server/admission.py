"""Admitting one request's input: its body read within ``max_body_bytes``, and the memory its
input holds counted against the memory budget from the moment it arrives or is decoded until its
job is done (:meth:`expert_server.pool.Pool.hold`).

The body is counted as it arrives (a ``Content-Length`` over the limit is refused before any of it
is read); a decoded input is counted by the payload readers before they decode
(:class:`expert_server.payload.Payload`'s ``charge``), from the thread they run in.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

from starlette.requests import ClientDisconnect, Request

from .errors import ClientClosed, TooLarge
from .pool import Pool


class Held:
    """The bytes one request holds in ``pool`` for ``model_id``; :meth:`release` gives them back
    (once; later calls do nothing)."""

    def __init__(self, pool: Pool, model_id: str) -> None:
        self.pool, self.model_id, self.bytes = pool, model_id, 0

    def grow(self, nbytes: int) -> None:
        """Hold ``nbytes`` more (on the event loop).

        Raises:
            Busy, TooLarge: :meth:`Pool.hold` refused them (nothing more is held).
        """
        self.pool.hold(nbytes, self.model_id)
        self.bytes += nbytes

    def shrink(self, nbytes: int) -> None:
        """Give back ``nbytes`` of what is held (on the event loop)."""
        nbytes = min(nbytes, self.bytes)
        self.bytes -= nbytes
        self.pool.free(nbytes)

    def from_thread(self, loop: asyncio.AbstractEventLoop) -> Callable[[int], None]:
        """:meth:`grow` for a worker thread: runs it on ``loop`` and waits for its answer (raising
        what it raised)."""
        def charge(nbytes: int) -> None:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()

            def grow() -> None:
                try:
                    self.grow(nbytes)
                    done.set_result(None)
                except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                    done.set_exception(e)
            loop.call_soon_threadsafe(grow)
            done.result()
        return charge

    def release(self) -> None:
        """Give back everything held."""
        nbytes, self.bytes = self.bytes, 0
        if nbytes:
            self.pool.free(nbytes)


async def read_body(request: Request, limit: tuple[int, str], held: Held) -> bytes:
    """The request body, at most ``limit[0]`` bytes (``limit[1]``: the setting that says so, for
    the sentence), each piece held in ``held`` as it arrives.

    Raises:
        TooLarge: the declared or the received length is over ``limit`` (413).
        ClientClosed: the client left before the body was complete (499).
        Busy, TooLarge: the memory budget refused the body (:meth:`Held.grow`).
    """
    limit, setting = limit

    def over(size: str) -> TooLarge:
        return TooLarge("body", f"is {size} bytes long", setting)

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise over(declared)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise over(f"more than {limit}")
            held.grow(len(chunk))
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientClosed("The client left while sending its request.") from None
    held.grow(size)  # the joined copy, while the pieces still exist
    body = b"".join(chunks)
    del chunks
    held.shrink(size)
    return body
