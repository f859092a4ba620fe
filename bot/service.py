"""The service every front end talks to: checks and stores user files, keeps conversations,
builds the pipeline from settings, and runs requests.

Front ends (``adapters/``) call :meth:`Service.handle` with platform-neutral input and render the
events it yields. They never decide anything about tasks or models.
"""

from __future__ import annotations

from dataclasses import dataclass


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


# ---------------------------------------------------------------------------------------------

import asyncio  # noqa: E402
import logging  # noqa: E402
from collections.abc import AsyncIterator, Sequence  # noqa: E402

from pipeline.catalog import Availability, Catalog  # noqa: E402
from pipeline.core import Pipeline  # noqa: E402
from pipeline.errors import ConfigError, InputError  # noqa: E402
from pipeline.execution import ExecutionLimits  # noqa: E402
from pipeline.experts import Experts, ExpertSettings  # noqa: E402
from pipeline.llm import Controller  # noqa: E402
from pipeline.media import LocalResourceSink, MediaStore  # noqa: E402
from pipeline.types import Done, Event, Request, Resource, RunRecord  # noqa: E402

from .config import Settings  # noqa: E402

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
    """The service front ends talk to (see the module docstring). Build with :meth:`create`."""

    def __init__(self, settings: Settings, pipeline: Pipeline, media: MediaStore, closers: Sequence) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.media = media
        self._closers = list(closers)
        self._inflight: set[asyncio.Task] = set()

    @classmethod
    async def create(cls, settings: Settings) -> "Service":
        """Build the controller client, catalog, experts and stores from ``settings``.

        Raises:
            ConfigError: a credential is missing or the catalog file is unusable.
        """
        require_credentials(settings)
        llm = settings.llm
        controller = Controller(
            model=llm.model,
            base_url=llm.base_url,
            api_key=_secret(llm.api_key) or "",
            timeout=llm.timeout,
            max_retries=llm.max_retries,
            structured_output=llm.structured_output,
            temperature=llm.temperature,
        )
        inf = settings.inference
        catalog = Catalog.load(settings.catalog.path)
        availability = Availability(
            provider=inf.provider,
            base_url=inf.base_url,
            endpoints=inf.endpoints,
            token=_secret(inf.token),
            ttl=settings.catalog.availability_ttl,
        )
        experts = Experts(
            ExpertSettings(
                provider=inf.provider,
                token=_secret(inf.token),
                base_url=inf.base_url,
                endpoints=inf.endpoints,
                task_timeout=inf.task_timeout,
                max_attempts=inf.max_attempts,
                backoff_max=inf.backoff_max,
            )
        )
        from pipeline.selection import Selector

        selector = Selector(
            catalog,
            availability,
            controller,
            strategy=inf.selection,
            top_k=inf.top_k,
            controller_tasks=inf.controller_tasks,
        )
        limits = ExecutionLimits(task_timeout=inf.task_timeout, deadline=inf.deadline, max_candidates_tried=inf.max_candidates_tried)
        pipeline = Pipeline(controller, selector, experts, limits)
        media = MediaStore(settings.storage.data_dir)
        return cls(settings, pipeline, media, [experts.aclose, controller.aclose])

    async def close(self) -> None:
        """Cancel runs in flight (their records end as errors) and close clients."""
        for t in list(self._inflight):
            t.cancel()
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
        from pipeline.media import inspect_upload

        limit = self.settings.storage.max_files
        if len(files) > limit:
            raise InputError(f"Please send at most {limit} files at a time.")
        for f in files:
            await inspect_upload(f.data, f.name, f.declared_mime, max_bytes=self.settings.storage.max_file_bytes)

    async def _store_files(self, sink: LocalResourceSink, files: Sequence[IncomingFile]) -> list[Resource]:
        limit = self.settings.storage.max_files
        if len(files) > limit:
            raise InputError(f"Please send at most {limit} files at a time.")
        out = []
        for f in files:
            out.append(
                await sink.add_user_file(f.data, f.name, f.declared_mime, max_bytes=self.settings.storage.max_file_bytes)
            )
        return out

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
            InputError: before the first event, if a file is unusable (nothing is stored then).
        """
        text = (text or "").strip()
        if not text and not files:
            raise InputError("Please write a request (and attach files if it needs them).")
        await self.check_files(files)
        sink = LocalResourceSink(self.media)
        stored = await self._store_files(sink, files)
        request = Request(text=text or "What can you tell me about these files?", files=stored)
        async for event in self.pipeline.run(request, sink):
            yield event
