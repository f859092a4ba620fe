"""One turn run in its own asyncio task, its events handed over through a queue.

The HTTP response must be decided (a 400 for a refused request, or a 200 stream) before the first
event, which may come only after task planning; and a client that goes away must cancel the run.
:class:`Run` does both: :meth:`Run.started` waits until the service has accepted the request
(``on_start``) or refused it; :meth:`Run.cancel` cancels the task, and the service stores the
turn as interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from bot.errors import InputError, StorageError
from bot.incoming import Message
from adapters.turn import Outcome, TurnView, follow
from bot.service import Service
from pipeline.types import Done, Event, RunRecord

from .errors import ApiError, storage_error

log = logging.getLogger("adapters.http")

_END = object()


class Run:
    """A turn of :meth:`bot.service.Service.handle` running in a task.

    Args:
        service: the service.
        message: the request (its ``on_start`` is this run's).
        on_end: called once when the run's task ends (gives back the caller's run slot).
    """

    def __init__(self, service: Service, message: Message, *, on_end: Callable[[], None] | None = None) -> None:
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._accepted: asyncio.Future[tuple[str | None, int]] = asyncio.get_running_loop().create_future()
        self.record: RunRecord | None = None
        self.conversation_id: str | None = None
        self.turn = 0
        self._task = asyncio.create_task(self._drive(service, replace(message, on_start=self._on_start)))
        if on_end is not None:
            self._task.add_done_callback(lambda _: on_end())

    def _on_start(self, conversation_id: str | None, turn: int) -> None:
        self.conversation_id, self.turn = conversation_id, turn
        if not self._accepted.done():
            self._accepted.set_result((conversation_id, turn))

    async def _drive(self, service: Service, message: Message) -> None:
        try:
            async for event in service.handle(message):
                if isinstance(event, Done):
                    self.record = event.record
                self._queue.put_nowait(event)
        except BaseException as e:
            if not self._accepted.done():
                if isinstance(e, Exception):
                    self._accepted.set_exception(e)
                else:
                    self._accepted.cancel()
            self._queue.put_nowait(e)
            if not isinstance(e, Exception):
                raise
        finally:
            self._queue.put_nowait(_END)

    async def started(self) -> None:
        """Wait until the service accepted the request.

        Raises:
            ApiError: 400 with the service's sentence when it refused the request
                (:class:`InputError`), 503 when the conversation store failed.
        """
        try:
            await asyncio.shield(self._accepted)
        except InputError as e:
            raise ApiError(400, e.user_message, "invalid_request") from None
        except StorageError as e:
            log.warning("run not accepted: %s", e)
            raise storage_error(e) from None

    async def events(self) -> AsyncIterator[Event]:
        """The run's events until :class:`Done`; an error the run ended with is raised here."""
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]

    async def follow(self, view: TurnView) -> Outcome:
        """This run's turn followed with ``view`` (:func:`adapters.turn.follow`) to its end."""
        return await follow(self.events(), view, where=f"http {self.conversation_id}/{self.turn}")

    async def streamed(self, view_emitting: Callable[[Callable[[object], None]], TurnView]) -> AsyncIterator[object]:
        """What the view ``view_emitting(emit)`` emits while it follows this run's turn, as it comes
        (a streamed reply's chunks or events); the turn's following is cancelled when the consumer
        stops first (the client went away)."""
        items: asyncio.Queue[object] = asyncio.Queue()
        turn = asyncio.create_task(self.follow(view_emitting(items.put_nowait)))
        turn.add_done_callback(lambda _: items.put_nowait(_END))
        try:
            while (item := await items.get()) is not _END:
                yield item
        finally:
            if not turn.done():
                turn.cancel()

    @property
    def done(self) -> bool:
        """Whether the run's task has ended."""
        return self._task.done()

    async def cancel(self) -> None:
        """Cancel the run (the client went away) and wait until the service stored the turn."""
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task

    async def wait_or_disconnect(self, receive: Callable[[], object]) -> bool:
        """Wait for the run to end, or for the client to disconnect (then cancel the run).

        Args:
            receive: the ASGI ``receive`` of the request (its body already read).

        Returns:
            ``True`` when the run ended, ``False`` when the client went away first.
        """
        async def gone() -> None:
            while True:
                message = await receive()  # type: ignore[misc]
                if message.get("type") == "http.disconnect":
                    return

        watcher = asyncio.create_task(gone())
        try:
            await asyncio.wait({self._task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not watcher.done():
                watcher.cancel()
        if self._task.done():
            return True
        await self.cancel()
        return False
