"""The resources of recently loaded chat logs, kept per process, so that loading a conversation's
chat log (:meth:`bot.store.sql.store.SQLStore.context`, which hands the planner every resource of
the conversation) reads and builds only the resources added since the last load, not all of them.

Sound because of how resource rows are written (:meth:`SQLStore.add_resource`): a row is never
changed or deleted on its own (only with its whole conversation), and its number ``n`` is taken
holding the conversation's row, so rows are committed in the order of ``n`` and a reader that
has seen ``n`` has seen every smaller one. The read starts *at* the last cached number: that row
coming back unchanged shows the cached ones are still the conversation's (a deleted conversation
returns nothing, and the caller reads it whole).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import bindparam, select

from pipeline.types import Resource

from .listing import RESOURCE_COLUMNS
from .schema import resources as R

CACHED_CONVERSATIONS = 256
"""Conversations whose resources a process keeps (least recently loaded dropped first)."""
CACHED_RESOURCES = 20_000
"""Resources a process keeps in all (about 800 bytes each, measured with ``tracemalloc``: 16 MB);
a conversation with more is read whole every time."""

SINCE = (select(*RESOURCE_COLUMNS, R.c.tokens, R.c.n)
         .where(R.c.conversation_id == bindparam("cid"), R.c.n >= bindparam("since")).order_by(R.c.n))
"""A conversation's resource rows from number ``since`` on (the primary key's range), oldest first:
``(*RESOURCE_COLUMNS, tokens, n)``."""

Entry = tuple[int, tuple[str, str], tuple[tuple[Resource, int], ...]]
"""``(last n, (its id, its stored path), every (resource, prompt tokens) so far)``."""


class ResourceCache:
    """Resources with their prompt-view token counts, by conversation id.

    Args:
        build: makes a :class:`Resource` of a row's :data:`RESOURCE_COLUMNS`.
        size: conversations kept (:data:`CACHED_CONVERSATIONS`); most: resources kept in all
            (:data:`CACHED_RESOURCES`).
    """

    def __init__(self, build: Callable[[Sequence[Any]], Resource], size: int = CACHED_CONVERSATIONS,
                 most: int = CACHED_RESOURCES) -> None:
        self._build, self._size, self._most = build, size, most
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._held = 0  # resources in the entries

    def since(self, conversation_id: str) -> int:
        """The number to read :data:`SINCE` from: the last one kept (0: none kept)."""
        entry = self._entries.get(conversation_id)
        return entry[0] if entry is not None else 0

    def update(self, conversation_id: str, since: int, rows: Sequence[Sequence[Any]]
               ) -> list[tuple[Resource, int]] | None:
        """Add the rows :data:`SINCE` returned for ``since`` (:meth:`since` when it was read).

        Returns:
            Every resource of the conversation with its tokens, oldest first; ``None`` when the
            rows do not continue the kept ones (the conversation was deleted, or another load
            kept newer rows meanwhile: the entry is dropped, read it again from 0).
        """
        entry = self._entries.get(conversation_id) if since else None
        kept: tuple[tuple[Resource, int], ...] = ()
        if since:
            if entry is None or entry[0] != since or not rows or (rows[0][10], (rows[0][0], rows[0][2])) != entry[:2]:
                self._drop(conversation_id)
                return None
            kept, rows = entry[2], rows[1:]
        if rows:
            kept += tuple((self._build(row[:9]), int(row[9])) for row in rows)
            last = rows[-1]
            entry = (int(last[10]), (last[0], last[2]), kept)
        if entry is not None:
            self._keep(conversation_id, entry)
        return list(kept)

    def _keep(self, conversation_id: str, entry: Entry) -> None:
        """Keep ``entry`` as the most recent, dropping the least recent ones beyond the bounds."""
        self._drop(conversation_id)
        if len(entry[2]) > self._most:
            return
        self._entries[conversation_id] = entry
        self._held += len(entry[2])
        while len(self._entries) > self._size or self._held > self._most:
            self._held -= len(self._entries.popitem(last=False)[1][2])

    def _drop(self, conversation_id: str) -> None:
        entry = self._entries.pop(conversation_id, None)
        if entry is not None:
            self._held -= len(entry[2])
