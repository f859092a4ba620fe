"""The service every front end talks to: checks and stores user files, keeps conversations,
builds the pipeline from settings, and runs requests.

Front ends (``adapters/``) call :meth:`Service.handle` with platform-neutral input and render the
events it yields. They never decide anything about tasks or models.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from collections.abc import AsyncIterator, Callable, Sequence

from pipeline.core import Pipeline
from pipeline.followup import work_summary
from pipeline.types import Done, Event, Request, Resource, RunRecord, Turn

from .backends import build_pipeline
from .documents import expand_documents
from .errors import InputError, StorageError
from .incoming import ConversationKey, IncomingFile
from .limits import check_request_size
from .locks import ThreadLocks
from .mentions import check_mentions
from .settings import Settings
from .store import ConversationStore, Handover, LocalResourceSink, MediaStore, open_store
from .store.deferred import DeferredLedger
from .uploads import Inspected, inspect_upload


log = logging.getLogger(__name__)


class Service:
    """The service front ends talk to (see the module docstring). Build with :meth:`create`.

    Conversations (``key`` given): the user's files and every generated file become resources of
    the conversation with stable ids; the planning and response prompts see the chat log (earlier
    turns, newest first, within ``[storage] context_tokens``); each turn is stored with its plan,
    model choices, results, answer, files, timings and status. Two turns of one conversation run
    in order; different conversations never wait for each other.

    Attributes:
        store: the conversation store (``None`` when built without conversations).
        events: the channel on which the store publishes what it finds of gone processes sharing
            it (turns marked interrupted, deliveries taken over); front ends subscribe to it
            (:class:`bot.store.Handover`: ``events.on_interrupted(listener)``,
            ``events.on_redelivery(prefix, listener)``).
    """

    def __init__(
        self, settings: Settings, pipeline: Pipeline, media: MediaStore, store: ConversationStore | None,
        closers: Sequence, events: Handover | None = None,
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.media = media
        self.store = store
        self.events = events or Handover()
        self._closers = list(closers)
        self._locks = ThreadLocks()
        self._inflight: set[asyncio.Task] = set()

    @classmethod
    async def create(cls, settings: Settings, *, conversations: bool = True) -> "Service":
        """Build the controller client, catalog, experts and stores from ``settings``.

        Args:
            settings: the settings.
            conversations: open the conversation store (``False``: requests without a
                conversation key only, as ``hugginggpt run``: the store is then opened only if a
                media file is written, to record it and keep the media quota,
                :class:`bot.store.deferred.DeferredLedger`).

        Raises:
            ConfigError: a credential is missing or the catalog file is unusable.
            StorageError: the conversation database is corrupt, locked or not writable.
        """
        pipeline, closers = build_pipeline(settings)
        media = MediaStore(settings.storage.data_dir)
        events = Handover()  # turns of gone processes found while opening wait there for a front end
        store = None
        if conversations:
            try:
                store = await open_store(settings.storage, media, events=events)
            except BaseException:
                for close in closers:
                    await close()
                raise
            closers = [*closers, store.close]
        else:
            media.ledger = ledger = DeferredLedger(settings.storage, media)
            closers = [*closers, ledger.close]
            log.info("no conversation is kept by this command; the store under %s is opened only to record a file",
                     settings.storage.data_dir)
        pipeline.refresh_served_tasks()  # Hub look-ups start now, not when the first request arrives
        return cls(settings, pipeline, media, store, [*closers, events.close], events)

    @property
    def conversations(self) -> ConversationStore:
        """The open conversation store.

        Raises:
            StorageError: the service was built without one.
        """
        if self.store is None:
            raise StorageError("This command keeps no conversations.", "Service built with conversations=False")
        return self.store

    async def close(self) -> None:
        """Cancel runs in flight (their turns are stored as failed: "interrupted") and close clients."""
        for t in list(self._inflight):
            t.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        for close in self._closers:
            try:
                await close()
            except Exception:  # pragma: no cover - best effort on shutdown
                log.exception("error while closing")

    async def check_files(self, files: Sequence[IncomingFile]) -> list[IncomingFile]:
        """Check user files without storing them.

        Returns:
            The same files, marked as checked: :meth:`handle` does not inspect them again.

        Raises:
            InputError: too many files, or one is empty, too large, undecodable, of an unsupported
                type or labelled as another kind than its content.
        """
        files = await expand_documents(files, self.settings.documents)  # a PDF: its text and image-only pages
        infos = await self._inspect(files)
        return [replace(f, checked=info) for f, info in zip(files, infos)]

    async def _inspect(self, files: Sequence[IncomingFile]) -> list[Inspected]:
        limit = self.settings.storage.max_files
        if len(files) > limit:
            raise InputError(f"Please send at most {limit} files at a time.")
        return [
            f.checked or await inspect_upload(f.data, f.name, f.declared_mime, max_bytes=self.settings.storage.max_file_bytes,
                                              max_pixels=self.settings.inference.max_image_pixels,
                                              max_text_bytes=self.settings.storage.max_text_file_bytes)
            for f in files
        ]

    async def conversation_id(self, key: ConversationKey) -> str:
        """The stored conversation id of ``key`` (created on first use)."""
        return await self.conversations.get_or_create(key)

    async def start_over(self, key: ConversationKey) -> bool:
        """The next turn of ``key`` starts a new conversation (a DM's "new"); the earlier one stays
        stored under its id (a turn still running in it finishes there). Returns whether there was one.

        Raises:
            StorageError: the conversation store fails.
        """
        return await self.conversations.retire(key) is not None

    async def note_delivery(self, key: str, payload: str) -> None:
        """Replace what is kept with a delivery not started yet (``ConversationStore.note_delivery``);
        failures are logged only (the first payload stays)."""
        try:
            await self.conversations.note_delivery(key, payload)
        except StorageError as e:
            log.warning("could not note delivery %s: %s", key, e)

    async def settle_delivery(self, key: str | None) -> None:
        """Forget the payload of a delivery handled without a turn (refused, ignored, failed
        before the run); see ``ConversationStore.settle_delivery``. Failures are logged only."""
        if key:
            try:
                await self.conversations.settle_delivery(key)
            except StorageError as e:
                log.warning("could not settle delivery %s: %s", key, e)

    async def claim_delivery(self, *keys: str | None, payload: str | None = None) -> bool:
        """Whether this process is the first of those sharing the data dir to take a platform
        delivery known by any of ``keys`` (``None`` ones ignored); see ``ConversationStore.claim_delivery``
        (``payload``: the event, kept with the first key until its turn begins or it is settled).

        Raises:
            StorageError: the conversation store fails.
        """
        present = list(dict.fromkeys(k for k in keys if k))
        return not present or await self.conversations.claim_delivery(present, payload)

    async def record_feedback(self, conversation_id: str, turn: int, verdict: str, user: str) -> bool:
        """Store ``user``'s ``verdict`` (``"good"`` or ``"bad"``) on a stored turn; ``False`` when
        the turn no longer exists or the verdict is not one of those.

        Raises:
            StorageError: the conversation store fails.
        """
        if verdict not in ("good", "bad"):
            return False
        return await self.conversations.record_feedback(conversation_id, turn, user, verdict)

    async def handle(
        self,
        text: str,
        files: Sequence[IncomingFile] = (),
        *,
        key: ConversationKey | None = None,
        user: str | None = None,
        stop: asyncio.Event | None = None,
        chat_log: Sequence[Turn] = (),
        on_start: Callable[[str | None, int], None] | None = None,
        delivery: str | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn; see the module docstring and ``pipeline.core.Pipeline.run``.

        ``stop``: set it to stop the run (a Stop button, Ctrl-C): the answer covers what finished
        and the turn is stored with it (``record.stopped``).

        ``on_start(conversation_id, turn)`` (``None``, 0 outside a conversation) is called once the
        request passed its checks and the pipeline starts: a front end that must answer before the
        first event (an HTTP response) knows then that no :class:`InputError` can follow.

        ``delivery``: the key of the platform delivery this turn answers (``claim_delivery``): it is
        settled when the turn is recorded, in the same transaction.

        ``chat_log`` (newest first, already within the budget) is the history a client keeps itself
        (the OpenAI API sends earlier messages with each request); it is used only when the
        conversation has no stored turn yet.

        Raises:
            InputError: before the first event, if a file is unusable or the text names a resource
                id this conversation does not have (nothing is stored then).
            StorageError: before the first event, if the conversation store fails.
        """
        text = (text or "").strip()
        check_request_size(text, self.settings.planning.max_request_chars)
        if not text and not files:
            raise InputError("Please write a request (and attach files if it needs them).")
        text = text or "What can you tell me about these files?"
        files = await expand_documents(files, self.settings.documents)  # a PDF: its text and image-only pages
        if key is None:
            infos = await self._inspect(files)
            check_mentions(text, [], [i.kind for i in infos], None)
            sink = LocalResourceSink(self.media)
            stored = [
                await sink.add(f.data, kind=i.kind, mime=i.mime, origin="user", description=i.description, name=f.name)
                for f, i in zip(files, infos)
            ]
            if on_start is not None:
                on_start(None, 0)
            async for event in self.pipeline.run(Request(text=text, files=stored, history=list(chat_log)), sink, stop=stop):
                yield event
            return
        async with self._locks.lock(key.as_string()):  # taken first: a thread's turns keep their order of arrival
            infos = await self._inspect(files)
            async for event in self._conversation_turn(key, text, list(zip(files, infos)), user, chat_log, on_start,
                                                       stop, delivery):
                yield event

    async def _with_work(self, conv: str, history: list[Turn]) -> list[Turn]:
        """``history`` (newest first) with what was run for its newest turn (``Turn.work``), so a
        follow-up that corrects that turn ("use the other photo") is planned knowing its tasks,
        files and results; unchanged when the turn's record cannot be read (logged)."""
        if not history:
            return history
        try:
            views = await self.conversations.turns(conv)
        except StorageError as e:
            log.warning("could not read the record of turn %s/%d for the chat log: %s", conv, history[0].index, e)
            return history
        record = next((v.get("record") for v in views if v.get("index") == history[0].index), None)
        if not isinstance(record, dict):
            return history
        return [replace(history[0], work=work_summary(record)), *history[1:]]

    async def _conversation_turn(
        self, key: ConversationKey, text: str, files: list[tuple[IncomingFile, Inspected]], user: str | None,
        chat_log: Sequence[Turn] = (), on_start: Callable[[str | None, int], None] | None = None,
        stop: asyncio.Event | None = None, delivery: str | None = None,
    ) -> AsyncIterator[Event]:
        conv = await self.conversations.get_or_create(key)
        history, earlier = await self.conversations.context(conv, self.settings.storage.context_tokens)
        history = await self._with_work(conv, history) or list(chat_log)
        check_mentions(text, earlier, [info.kind for _, info in files], key.platform)
        turn = await self.conversations.begin_turn(conv, text, user, delivery)
        record: RunRecord | None = None
        try:
            if await self.conversations.wait_turn(conv, turn):  # an earlier turn ran in another process: plan after it
                history, earlier = await self.conversations.context(conv, self.settings.storage.context_tokens)
                history = await self._with_work(conv, history) or list(chat_log)
            stored: list[Resource] = []
            for f, info in files:
                stored.append(
                    await self.conversations.add_resource(
                        conv, turn, f.data, kind=info.kind, mime=info.mime, origin="user", description=info.description, name=f.name
                    )
                )
            request = Request(
                text=text, files=stored, resources=earlier, history=history, conversation_id=conv, turn=turn
            )
            me = asyncio.current_task()
            if me is not None:
                self._inflight.add(me)
            if on_start is not None:
                on_start(conv, turn)
            try:
                async for event in self.pipeline.run(request, self.conversations.sink(conv, turn), stop=stop):
                    if isinstance(event, Done):
                        record = event.record
                        await self.conversations.finish_turn(conv, turn, record)
                    yield event
            finally:
                if me is not None:
                    self._inflight.discard(me)
        finally:
            if record is None:  # failed before the pipeline ended, or cancelled (shutdown, Ctrl-C)
                failed = RunRecord(request=text, status="error", error="This turn was interrupted before it finished.")
                try:
                    await asyncio.shield(self.conversations.finish_turn(conv, turn, failed))
                except Exception:
                    log.exception("could not mark turn %s/%d as failed", conv, turn)
