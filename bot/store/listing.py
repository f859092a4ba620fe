"""Listing the files of every conversation of one owner (the HTTP API's ``GET /v1/files``).

What :meth:`bot.store.protocol.Conversations.files_of` returns; the store answers it with keyset
pagination over ``(created, conversation_id, n)`` (:mod:`bot.store.sql.listing`): a page never
skips or repeats a file when files are added meanwhile, and costs the same on the thousandth page
as on the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.types import Resource

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

