"""Retention and the media quota: which conversations and media files to delete
(``[storage] max_age_days``, ``max_media_bytes``, ``hugginggpt store prune|forget``).

The decisions (:func:`expired`, :func:`over_budget`, :func:`plan`) are pure functions over plain
rows, testable without a database; :mod:`bot.store.sql.retention` applies them (``prune``,
``forget``, and the write-time quota check of its ``Ledger``).

Rules (several processes may share the data directory, see :mod:`bot.store.lease`):

* Every media file the bot writes is recorded in the ``media`` table with its size and when it was
  last written or reused, conversation files and ``hugginggpt run`` files alike; the quota counts
  every recorded file once (identical content is stored once and shared).
* Protected, never deleted automatically: a conversation with a running turn, or active within
  :data:`~bot.store.lease.RECENT_SECONDS` (10 minutes); a file referenced by a kept
  conversation, pinned by a live owner (being written, or a ``run`` file of a running
  process), or written/reused within :data:`~bot.store.lease.RECENT_SECONDS`.
* ``max_age_days``: conversations idle longer, and unreferenced files unused longer, are deleted.
* ``max_media_bytes``, checked before every file is written (:class:`bot.store.sql.retention.Ledger`)
  and by ``prune``:
  while the recorded files plus the new one exceed the quota, delete unreferenced files, least
  recently used first, then the least recently active conversations (those past
  ``max_age_days`` come first, being the oldest) with the files only they referenced. If the
  protected files alone leave no room, nothing is deleted and the write is refused with a
  :class:`StorageError`.
* ``forget`` deletes one conversation whatever its age (but refuses while a live process runs a
  turn in it), and its files unless another conversation refers to them or a live owner pins them.
* Files are unlinked only while holding the database's write lock and after their rows are gone,
  so a process storing the same content at that moment either sees no row and writes the file
  again, or records it first and the file is kept; a crash in between leaves at worst an
  unrecorded file, never a row naming a missing file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


log = logging.getLogger(__name__)

SECONDS_PER_DAY = 86400.0

Activity = tuple[str, float, bool]
"""``(conversation id, last activity in epoch seconds, protected: has a running turn or was
active within RECENT_SECONDS)``."""
FileRef = tuple[str, str, int]
"""``(conversation id, stored media path, size in bytes)``: one resource row."""


def expired(conversations: Sequence[Activity], *, now: float, max_age_days: float | None) -> list[str]:
    """Conversations idle for longer than ``max_age_days``.

    Args:
        conversations: every conversation, oldest activity first.
        now: the current time, epoch seconds.
        max_age_days: the limit in days (``None``: no limit).

    Returns:
        Ids of the conversations without a running turn whose last activity is before
        ``now - max_age_days`` days, in the order given.
    """
    if max_age_days is None:
        return []
    cutoff = now - max_age_days * SECONDS_PER_DAY
    return [cid for cid, updated, running in conversations if not running and updated < cutoff]


def over_budget(
    conversations: Sequence[Activity], files: Iterable[FileRef], *, gone: Iterable[str], max_media_bytes: int
) -> list[str]:
    """Conversations to delete, least recently active first, until the media they leave behind
    fit in ``max_media_bytes``.

    A file counts once however many conversations refer to it (its largest recorded size), and
    stops counting only when its last referring conversation goes.

    Args:
        conversations: every conversation, oldest activity first.
        files: every resource row.
        gone: conversations already chosen for deletion (e.g. :func:`expired`).
        max_media_bytes: the limit in bytes.

    Returns:
        Ids to delete besides ``gone``, in deletion order; may leave the media over the limit
        when only conversations with a running turn remain.
    """
    refs: dict[str, set[str]] = {}
    size_of: dict[str, int] = {}
    by_conv: dict[str, set[str]] = {}
    for cid, path, size in files:
        refs.setdefault(path, set()).add(cid)
        size_of[path] = max(size, size_of.get(path, 0))
        by_conv.setdefault(cid, set()).add(path)
    deleted = set(gone)
    for cid in deleted:
        for p in by_conv.get(cid, ()):
            refs[p].discard(cid)
    total = sum(size_of[p] for p, owners in refs.items() if owners)
    out: list[str] = []
    for cid, _, running in conversations:
        if total <= max_media_bytes:
            break
        if running or cid in deleted:
            continue
        deleted.add(cid)
        out.append(cid)
        for p in by_conv.get(cid, ()):
            refs[p].discard(cid)
            if not refs[p]:
                total -= size_of[p]
    return out


@dataclass(frozen=True)
class MediaFile:
    """A recorded media file, for :func:`plan`.

    Attributes:
        size: bytes.
        used: when it was last written or reused, epoch seconds.
        keep: pinned by a live owner or used within :data:`RECENT_SECONDS`.
    """

    size: int
    used: float
    keep: bool


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` deletes.

    Attributes:
        conversations: conversation ids to delete, in order.
        files: stored paths of the files to delete (their rows and the files on disk).
        total: bytes of the recorded files left afterwards.
        fits: whether ``total`` plus the incoming bytes is within the quota (always ``True``
            without a quota).
    """

    conversations: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    total: int = 0
    fits: bool = True


def plan(
    conversations: Sequence[Activity],
    refs: Iterable[tuple[str, str]],
    files: Mapping[str, MediaFile],
    *,
    now: float,
    max_age_days: float | None,
    max_media_bytes: int | None,
    incoming: int = 0,
) -> Plan:
    """Decide what retention deletes (the rules are in the module docstring).

    Args:
        conversations: every conversation, least recently active first.
        refs: ``(conversation id, stored path)`` of every resource row.
        files: every recorded file by stored path.
        now: the current time, epoch seconds.
        max_age_days: days (``None``: no age limit).
        max_media_bytes: the quota in bytes (``None``: no quota).
        incoming: bytes about to be written (counted against the quota).

    Returns:
        The :class:`Plan`; ``fits`` is ``False`` when even deleting every unprotected
        conversation and file leaves no room for ``incoming``.
    """
    d = _Deletions(files, refs)
    for cid in expired(conversations, now=now, max_age_days=max_age_days):
        d.drop(cid)
    unreferenced = sorted((f.used, p) for p, f in files.items() if not d.owners[p])
    if max_age_days is not None:
        cutoff = now - max_age_days * SECONDS_PER_DAY
        for used, p in unreferenced:
            if used < cutoff:
                d.free(p)
    if max_media_bytes is None:
        return Plan(d.conversations, d.files, d.total, True)
    limit = max_media_bytes - incoming
    for _, p in unreferenced:
        if d.total <= limit:
            break
        d.free(p)
    for cid, _, protected in conversations:
        if d.total <= limit:
            break
        if not protected and cid not in d.conversations:
            d.drop(cid)
    return Plan(d.conversations, d.files, d.total, d.total <= limit)


class _Deletions:
    """What :func:`plan` has chosen so far: conversations and files, and the bytes left."""

    def __init__(self, files: Mapping[str, MediaFile], refs: Iterable[tuple[str, str]]) -> None:
        self.known = files
        self.owners: dict[str, set[str]] = {p: set() for p in files}  # path -> conversations referring to it
        self.by_conv: dict[str, set[str]] = {}
        for cid, path in refs:
            self.owners.setdefault(path, set()).add(cid)
            self.by_conv.setdefault(cid, set()).add(path)
        self.total = sum(f.size for f in files.values())
        self.conversations: list[str] = []
        self.files: list[str] = []
        self._chosen: set[str] = set()

    def free(self, path: str) -> None:
        """Delete a recorded file unless referenced, protected or chosen already."""
        f = self.known.get(path)
        if f is not None and not self.owners[path] and not f.keep and path not in self._chosen:
            self._chosen.add(path)
            self.files.append(path)
            self.total -= f.size

    def drop(self, cid: str) -> None:
        """Delete a conversation, then the files only it referred to (least recently used first)."""
        self.conversations.append(cid)
        for p in sorted(self.by_conv.get(cid, ()), key=lambda p: self.known[p].used if p in self.known else 0.0):
            self.owners[p].discard(cid)
            self.free(p)
