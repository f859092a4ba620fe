"""What front ends hand the service: files as bytes, and the key of the conversation they belong to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .uploads import Inspected


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
