"""What front ends hand the service: one :class:`Message` per request (its text, files, requester,
conversation, the platform delivery it answers and a stop signal), and the :class:`Accepted` event
the service answers first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pipeline.types import Turn

    from .uploads import Inspected


Platform = Literal["discord", "slack", "terminal", "http", "mcp"]
"""The front ends; only Discord and Slack have admission settings (:mod:`bot.admission`)."""


@dataclass(frozen=True)
class Requester:
    """Who asks, and where.

    Attributes:
        platform: ``"discord" | "slack" | "terminal" | "http" | "mcp"`` (only Discord and Slack
            have admission settings; the others admit their callers themselves).
        user: the platform's user id (the API key's id over HTTP and MCP); the stored turn names it.
        channels: the channel and, in a thread, its parent (either may be allowed).
        workspace: the Discord guild id or Slack team id (``None`` in a Discord DM or group DM).
        roles: the member's role ids (Discord).
        is_dm: a direct message (on Discord also a group DM).
    """

    platform: Platform
    user: str
    channels: tuple[str, ...] = ()
    workspace: str | None = None
    roles: tuple[str, ...] = ()
    is_dm: bool = False

    @property
    def key(self) -> Hashable:
        """The key of this user's budget."""
        return (self.platform, self.user)


@dataclass(frozen=True)
class IncomingFile:
    """A file a user attached, as bytes (platform URLs expire: download at once).

    Attributes:
        data: the file's content.
        name: the user's file name, if any.
        declared_mime: the platform's or user's content type, if any (never trusted: the type is
            sniffed from ``data``; a mismatch of kind is an error).
        checked: what :meth:`bot.service.Service.check_files` found, so the file is inspected once.
    """

    data: bytes
    name: str | None = None
    declared_mime: str | None = None
    checked: Inspected | None = None


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


@dataclass(frozen=True)
class Download:
    """Files still on the platform, fetched by the service only once the request is admitted.

    Attributes:
        count: how many files the message carries (checked against ``[storage] max_files``
            before anything is downloaded).
        fetch: downloads them; called with the byte limit per file (``[storage] max_file_bytes``).
            Raises :class:`bot.errors.InputError` for a file that cannot be downloaded.
    """

    count: int
    fetch: Callable[[int], Awaitable[Sequence[IncomingFile]]]


@dataclass(frozen=True)
class Delivery:
    """The platform delivery a message answers (an event, a message, an interaction), taken by one
    process among those sharing the store (``ConversationStore.claim_delivery``).

    Attributes:
        keys: the delivery's keys (``"slack:event:Ev1"``, ``"discord:message:123"``); the first is
            settled when the turn is recorded, or when the message ends without one.
        payload: what another process needs to answer the delivery if this one dies first (the
            event as JSON), read when claimed and again after :class:`Accepted` was shown (a front
            end that posted a status message adds its id then); ``None``: nothing to keep.
        claimed: already taken by this process (a delivery adopted from a dead process).
    """

    keys: tuple[str, ...]
    payload: Callable[[], str | None] | None = None
    claimed: bool = False


@dataclass(frozen=True)
class Approve:
    """What a :class:`Message` carries to run a plan kept for approval (a Run press, :mod:`bot.approval`).

    Attributes:
        plan_id: the kept plan's id (``bot.approval.ApprovalNeeded.plan_id``).
        drop: task ids to leave out (with every task that needs them).
        kept: set by the service once it took the plan: the ``bot.approval.PendingPlan`` the turn runs.
    """

    plan_id: str
    drop: tuple[int, ...] = ()
    kept: object | None = None


@dataclass(frozen=True)
class Message:
    """One request as a front end hands it to :meth:`bot.service.Service.handle`.

    Attributes:
        text: the user's words (mentions of the bot already removed).
        files: files already in memory (terminal, HTTP, MCP).
        download: files still on the platform (Slack, Discord), fetched after admission.
        who: the requester, for admission (access lists, rate, concurrency); ``None``: the front
            end admitted the caller itself (an API key, the local terminal).
        key: the conversation it belongs to; or how to find it, awaited once the files passed
            their checks (Discord opens its thread and posts its progress message then; a
            ``HuggingGPTError`` it raises ends the message with its sentence); ``None``: a
            one-off request, nothing kept.
        delivery: the platform delivery it answers; ``None``: none to claim.
        stop: set it to stop the run (a Stop button, Ctrl-C).
        chat_log: history the client keeps itself (newest first; the OpenAI API's earlier
            messages), used only when the conversation has no stored turn yet.
        memoryless_fallback: answer without memory of the conversation when the store fails as the
            turn starts (the chat bots), instead of raising :class:`bot.errors.StorageError`.
        on_start: called with ``(conversation_id, turn)`` (``None``, 0 outside a conversation) once
            the checks passed and the pipeline starts.
        context: what the platform says about where the user is (Slack's agent view: the channel
            they view), one untrusted line given to the controller beside the request
            (:attr:`pipeline.types.Request.context`), never stored as the user's words; ``""``: none.
        approve: run a plan kept for approval (a Run press, :mod:`bot.approval`): its request,
            files and conversation are the kept plan's (``text``, ``files`` and ``key`` are not read).
    """

    text: str
    files: Sequence[IncomingFile] = ()
    download: Download | None = None
    who: Requester | None = None
    key: ConversationKey | Callable[[], Awaitable[ConversationKey]] | None = None
    delivery: Delivery | None = None
    stop: asyncio.Event | None = None
    chat_log: Sequence[Turn] = ()
    memoryless_fallback: bool = False
    on_start: Callable[[str | None, int], None] | None = field(default=None, compare=False)
    context: str = ""
    approve: Approve | None = None


@dataclass(frozen=True)
class Accepted:
    """The first event of an admitted message (claimed, admitted, before its files are read): a
    front end may open its progress display now. Nothing is yielded for a delivery another process
    took, and a refused message raises :class:`bot.errors.Refused` instead."""
