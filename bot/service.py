"""The service every front end talks to: checks and stores user files, keeps conversations,
builds the pipeline from settings, and runs requests.

Front ends (``adapters/``) call :meth:`Service.handle` with platform-neutral input and render the
events it yields. They never decide anything about tasks or models.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from collections.abc import AsyncIterator, Sequence
from pipeline.catalog import Availability, Catalog
from pipeline.core import Pipeline
from pipeline.errors import ConfigError, InputError
from pipeline.execution import ExecutionLimits
from pipeline.experts import Experts, ExpertSettings
from pipeline.llm import Controller
from pipeline.media import Inspected, LocalResourceSink, MediaStore, inspect_upload
from pipeline.selection import Selector
from pipeline.types import Done, Event, Request, Resource, RunRecord
from .config import Settings
from .store import ConversationStore, ThreadLocks, open_store


@dataclass(frozen=True)
class IncomingFile:
    """A file a user attached, as bytes (platform URLs expire: download at once).

    Attributes:
        data: the file's content.
        name: the user's file name, if any.
        declared_mime: the platform's or user's content type, if any (never trusted: the type is
            sniffed from ``data``; a mismatch of kind is an error).
    """

    data: bytes
    name: str | None = None
    declared_mime: str | None = None


@dataclass(frozen=True)
class ConversationKey:
    """Identifies a conversation: platform + workspace/guild + channel + thread.

    ``thread`` is the thread id (Discord thread channel id, Slack ``thread_ts``, terminal session
    id). Two keys are the same conversation exactly when all four fields are equal.
    """

    platform: str
    workspace: str
    channel: str
    thread: str

    def as_string(self) -> str:
        """``platform:workspace:channel:thread``, the stored form."""
        return f"{self.platform}:{self.workspace}:{self.channel}:{self.thread}"

log = logging.getLogger(__name__)


def _secret(value) -> str | None:
    return value.get_secret_value() if value is not None else None


def require_credentials(settings: Settings) -> None:
    """Check that the backends have what they need.

    Raises:
        ConfigError: naming exactly the missing setting and where to set it.
    """
    if not _secret(settings.llm.api_key):
        raise ConfigError(
            "No API key for the controller LLM: set [llm] api_key in the config file, "
            "HUGGINGGPT_LLM__API_KEY or OPENAI_API_KEY (any string for a local server), or try --sandbox."
        )
    inf = settings.inference
    if not inf.base_url and inf.provider and not _secret(inf.token):
        raise ConfigError(
            "No Hugging Face token for Inference Providers: set [inference] token in the config file, "
            "HUGGINGGPT_INFERENCE__TOKEN or HF_TOKEN, or set [inference] base_url to your own gateway, or try --sandbox."
        )


class Service:
    """The service front ends talk to (see the module docstring). Build with :meth:`create`.

    Conversations (``key`` given): the user's files and every generated file become resources of
    the conversation with stable ids; the planning and response prompts see the chat log (earlier
    turns, newest first, within ``[storage] context_tokens``); each turn is stored with its plan,
    model choices, results, answer, files, timings and status. Two turns of one conversation run
    in order; different conversations never wait for each other.
    """

    def __init__(
        self, settings: Settings, pipeline: Pipeline, media: MediaStore, store: ConversationStore, closers: Sequence
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.media = media
        self.store = store
        self._closers = list(closers)
        self._locks = ThreadLocks()
        self._inflight: set[asyncio.Task] = set()

    @classmethod
    async def create(cls, settings: Settings) -> "Service":
        """Build the controller client, catalog, experts and stores from ``settings``.

        Raises:
            ConfigError: a credential is missing or the catalog file is unusable.
            StorageError: the conversation database is corrupt, locked or not writable.
        """
        require_credentials(settings)
        llm = settings.llm
        inf = settings.inference
        catalog = Catalog.load(settings.catalog.path)
        media = MediaStore(settings.storage.data_dir)
        store = await open_store(settings.storage, media)
        controller = Controller(
            model=llm.model,
            base_url=llm.base_url,
            api_key=_secret(llm.api_key) or "",
            timeout=llm.timeout,
            max_retries=llm.max_retries,
            structured_output=llm.structured_output,
            temperature=llm.temperature,
        )
        availability = Availability(
            provider=inf.provider,
            base_url=inf.base_url,
            endpoints=inf.endpoints,
            token=_secret(inf.token),
            ttl=settings.catalog.availability_ttl,
        )
        experts = Experts(ExpertSettings.from_inference(inf))
        selector = Selector(
            catalog, availability, controller, strategy=inf.selection, top_k=inf.top_k, controller_tasks=inf.controller_tasks
        )
        limits = ExecutionLimits(task_timeout=inf.task_timeout, deadline=inf.deadline, max_candidates_tried=inf.max_candidates_tried)
        pipeline = Pipeline(controller, selector, experts, limits)
        return cls(settings, pipeline, media, store, [experts.aclose, controller.aclose, store.close])

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

    async def check_files(self, files: Sequence[IncomingFile]) -> None:
        """Check user files without storing them.

        Raises:
            InputError: too many files, or one is empty, too large, undecodable, of an unsupported
                type or labelled as another kind than its content.
        """
        await self._inspect(files)

    async def _inspect(self, files: Sequence[IncomingFile]) -> list[Inspected]:
        limit = self.settings.storage.max_files
        if len(files) > limit:
            raise InputError(f"Please send at most {limit} files at a time.")
        return [
            await inspect_upload(f.data, f.name, f.declared_mime, max_bytes=self.settings.storage.max_file_bytes) for f in files
        ]

    async def conversation_id(self, key: ConversationKey) -> str:
        """The stored conversation id of ``key`` (created on first use)."""
        return await self.store.get_or_create(key)

    async def handle(
        self,
        text: str,
        files: Sequence[IncomingFile] = (),
        *,
        key: ConversationKey | None = None,
        user: str | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn; see the module docstring and ``pipeline.core.Pipeline.run``.

        Raises:
            InputError: before the first event, if a file is unusable or the text names a resource
                id this conversation does not have (nothing is stored then).
            StorageError: before the first event, if the conversation store fails.
        """
        text = (text or "").strip()
        if not text and not files:
            raise InputError("Please write a request (and attach files if it needs them).")
        infos = await self._inspect(files)
        text = text or "What can you tell me about these files?"
        if key is None:
            sink = LocalResourceSink(self.media)
            stored = [
                await sink.add(f.data, kind=i.kind, mime=i.mime, origin="user", description=i.description, name=f.name)
                for f, i in zip(files, infos)
            ]
            async for event in self.pipeline.run(Request(text=text, files=stored), sink):
                yield event
            return
        async with self._locks.lock(key.as_string()):
            async for event in self._conversation_turn(key, text, list(zip(files, infos)), user):
                yield event

    async def _conversation_turn(
        self, key: ConversationKey, text: str, files: list[tuple[IncomingFile, Inspected]], user: str | None
    ) -> AsyncIterator[Event]:
        conv = await self.store.get_or_create(key)
        history, earlier = await self.store.context(conv, self.settings.storage.context_tokens)
        check_resource_mentions(text, earlier, len(files))
        turn = await self.store.begin_turn(conv, text, user)
        record: RunRecord | None = None
        try:
            stored: list[Resource] = []
            for f, info in files:
                stored.append(
                    await self.store.add_resource(
                        conv, turn, f.data, kind=info.kind, mime=info.mime, origin="user", description=info.description, name=f.name
                    )
                )
            request = Request(
                text=text, files=stored, resources=earlier, history=history, conversation_id=conv, turn=turn
            )
            me = asyncio.current_task()
            if me is not None:
                self._inflight.add(me)
            try:
                async for event in self.pipeline.run(request, self.store.sink(conv, turn)):
                    if isinstance(event, Done):
                        record = event.record
                        await self.store.finish_turn(conv, turn, record)
                    yield event
            finally:
                if me is not None:
                    self._inflight.discard(me)
        finally:
            if record is None:  # failed before the pipeline ended, or cancelled (shutdown, Ctrl-C)
                failed = RunRecord(request=text, status="error", error="This turn was interrupted before it finished.")
                try:
                    await asyncio.shield(self.store.finish_turn(conv, turn, failed))
                except Exception:
                    log.exception("could not mark turn %s/%d as failed", conv, turn)


_MENTION = re.compile(r"\b(image|audio|video)-(\d+)\b", re.IGNORECASE)


def check_resource_mentions(text: str, resources: Sequence[Resource], new_files: int) -> None:
    """Refuse a request that names a resource id (``image-3``) this conversation does not have.

    Ids of files attached to this very message are not known yet, so ids of the attached kinds
    beyond the existing ones are allowed when files are attached.

    Raises:
        InputError: naming the missing id and the ids the conversation has.
    """
    have = {r.id.lower() for r in resources}
    for m in _MENTION.finditer(text):
        rid = m.group(0).lower()
        if rid in have:
            continue
        if new_files:
            continue
        same = sorted((r.id for r in resources if r.kind == m.group(1).lower()), key=lambda s: int(s.split("-")[1]))
        known = ", ".join(same) if same else f"no {m.group(1).lower()} yet"
        raise InputError(f"There is no {rid} in this conversation (it has {known}).")
