"""What front ends see of stored conversations, through the service (they never hold the store):
the files of every conversation of one owner (the HTTP API's ``GET /v1/files``) and one
conversation to resume (``hugginggpt chat --conversation``).

:class:`StoredFile` is what :meth:`bot.store.protocol.Conversations.files_of` returns; the store
answers it with keyset pagination over ``(created, conversation_id, n)`` (:mod:`bot.store.sql.listing`):
a page never skips or repeats a file when files are added meanwhile, and costs the same on the
thousandth page as on the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipeline.types import Resource

from .incoming import ConversationKey

Order = Literal["asc", "desc"]
Origin = Literal["user", "task"]


@dataclass(frozen=True)
class StoredFile:
    """A resource with where and when it was stored.

    Attributes:
        conversation_id: the conversation that holds it.
        resource: the file (id, kind, absolute path, sniffed MIME type, size in bytes, origin...).
        created: when it was stored, in seconds since the epoch.
    """

    conversation_id: str
    resource: Resource
    created: float


@dataclass(frozen=True)
class StoredConversation:
    """A stored conversation as a front end resumes it.

    Attributes:
        key: where it is held (platform, workspace, channel, thread).
        turns: every turn, oldest first, as JSON-able dicts
            (:meth:`bot.store.protocol.Conversations.turns`).
        files: every resource (the users' files and generated ones), oldest first.
    """

    key: ConversationKey
    turns: list[dict[str, Any]]
    files: list[Resource]
