"""Answering in a thread while the conversation store fails (a full disk, a database that cannot
be written): the chat bots (Discord, Slack, terminal chat) keep answering, without memory of the
conversation, and tell each thread once (``Service.handle(..., storage_fallback=True)``).

* :class:`ToldThreads`: which threads were told, process-local and bounded, so a thread hears the
  sentence once while the failure lasts and again after a turn of it was stored.
* :class:`ScratchSpace`: where the files of such a turn go (the user's uploads and the generated
  outputs) when the data directory cannot take them: a temporary directory on a memory file system
  (``/dev/shm`` when there is one, else the system's temporary directory, ``TMPDIR``), within a
  byte budget; a turn's files stay until the front end had time to post them
  (:data:`SCRATCH_KEEP_SECONDS`) or the budget needs their room, and are removed when the service
  closes.
* :class:`KeepOrFail`: a resource sink whose storage failure ends the task that produced the
  output (an ordinary task failure sentence) instead of the whole run.
* :class:`UnsavedTurns`: turns whose final save failed, kept to be saved before the thread's next
  turn (a turn left "running" in the store would make the next one wait for it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from cachetools import LRUCache, TTLCache

from pipeline.errors import ExpertError
from pipeline.types import Modality, Resource, ResourceSink, RunRecord

from .errors import StorageError
from .readiness import storage_sentence
from .store import ConversationStore, LocalResourceSink, MediaStore

log = logging.getLogger(__name__)

MiB = 1024 * 1024
SCRATCH_BYTES = 256 * MiB
"""Bytes the files of turns answered without the store may take at once (the oldest turns' files
are removed first to make room)."""
SCRATCH_KEEP_SECONDS = 3600.0
"""Seconds a turn's scratch files are kept after it began (front ends post them right after the
answer; the terminal shows their paths)."""
TOLD_THREADS = 10_000
"""Threads remembered as told at most (the least recently told are forgotten first)."""
TOLD_SECONDS = 3600.0
"""Seconds a thread is remembered as told: a failure lasting longer is said again after that."""
UNSAVED_TURNS = 1_000
"""Turns whose save failed kept at most, to be saved later (the least recent are dropped, logged)."""


def storage_condition(error: BaseException) -> str:
    """What is wrong with the storage, as the first clause of :func:`bot.readiness.storage_sentence`
    (``"The server's storage is full"``), naming no path."""
    return storage_sentence(error).split(";", 1)[0].rstrip(". ")


def without_memory_sentence(error: BaseException) -> str:
    """The thread's notice for a turn answered without the store (``error`` is the store's)."""
    return (f"{storage_condition(error)}, so I can't use or remember this conversation right now; "
            "I'll still answer this message on its own.")


def unsaved_sentence(error: BaseException) -> str:
    """The thread's notice for an answer that was given but could not be saved."""
    return (f"{storage_condition(error)}, so this answer could not be saved "
            "and I won't remember it later in this thread.")


def lost_context_sentence(error: BaseException) -> str:
    """Said with a refusal of a request that names files the store cannot give right now."""
    return f"{storage_condition(error)}, so I can't use the earlier messages and files of this thread right now."


class ToldThreads:
    """Threads told about the storage failure (keys: ``ConversationKey.as_string()``), bounded in
    number (:data:`TOLD_THREADS`) and time (:data:`TOLD_SECONDS`; ``cachetools.TTLCache``)."""

    def __init__(self, maxsize: int = TOLD_THREADS, ttl: float = TOLD_SECONDS) -> None:
        self._told: TTLCache[str, bool] = TTLCache(maxsize=maxsize, ttl=ttl)

    def first_time(self, key: str) -> bool:
        """Whether ``key`` is to be told now (``True`` once, then ``False`` until :meth:`forget`)."""
        if key in self._told:
            return False
        self._told[key] = True
        return True

    def forget(self, key: str) -> None:
        """A turn of ``key`` was stored: a later failure is told again."""
        self._told.pop(key, None)


@dataclass
class UnsavedTurn:
    """A turn whose final save failed: ``record`` is saved as turn ``turn`` of ``conversation``."""

    conversation: str
    turn: int
    record: RunRecord


class UnsavedTurns:
    """Turns whose save failed, by conversation id (bounded: :data:`UNSAVED_TURNS`, least recent
    dropped first with a log line)."""

    def __init__(self, maxsize: int = UNSAVED_TURNS) -> None:
        self._turns: LRUCache[str, UnsavedTurn] = LRUCache(maxsize=maxsize)

    def keep(self, conversation: str, turn: int, record: RunRecord) -> None:
        """Remember turn ``turn`` of ``conversation`` as not saved yet."""
        if conversation not in self._turns and len(self._turns) >= self._turns.maxsize:
            _, dropped = self._turns.popitem()
            log.warning("turn %s/%d is left unsaved: too many turns wait for the storage",
                        dropped.conversation, dropped.turn)
        self._turns[conversation] = UnsavedTurn(conversation, turn, record)

    async def save(self, conversation: str, store: ConversationStore) -> None:
        """Save the turn of ``conversation`` whose save failed, if any, in ``store``.

        Raises:
            StorageError: the store still fails (the turn stays kept).
        """
        unsaved = self._turns.get(conversation)
        if unsaved is None:
            return
        await store.finish_turn(conversation, unsaved.turn, unsaved.record)
        self._turns.pop(conversation, None)
        log.info("saved turn %s/%d, which could not be saved when it ended", conversation, unsaved.turn)


class _TurnFiles:
    """The scratch files of one turn: its directory, when it began (monotonic seconds) and its bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.began = time.monotonic()
        self.bytes = 0


class ScratchSpace:
    """Where the files of turns answered without the store go (see the module docstring).

    Args:
        base: the directory to make the scratch directory in (default: ``/dev/shm`` when it is a
            writable directory, else ``tempfile.gettempdir()``).
        budget: bytes all turns' files may take at once.
        keep: seconds a turn's files are kept at least, unless the budget needs their room.
    """

    def __init__(self, base: Path | None = None, *, budget: int = SCRATCH_BYTES,
                 keep: float = SCRATCH_KEEP_SECONDS) -> None:
        self.base = base
        self.budget = budget
        self.keep = keep
        self.root: Path | None = None
        self._turns: deque[_TurnFiles] = deque()
        self._count = itertools.count(1)

    def sink(self) -> LocalResourceSink:
        """A resource sink for one turn (ids ``image-1``, ``audio-1`` ... as a one-off run's).

        Its ``add`` raises :class:`StorageError` when the file cannot be kept (no room in the
        budget, or the scratch file system refused it).
        """
        return LocalResourceSink(_ScratchMedia(self))

    async def close(self) -> None:
        """Remove every scratch file."""
        self._turns.clear()
        if self.root is not None:
            await asyncio.to_thread(shutil.rmtree, self.root, True)
            self.root = None

    async def reserve(self, files: _TurnFiles | None, size: int) -> _TurnFiles:
        """Room for ``size`` more bytes of a turn (``None``: its first file), removing expired
        turns and then the oldest others while the budget needs it.

        Raises:
            StorageError: ``size`` does not fit even alone, or the scratch directory cannot be made.
        """
        now = time.monotonic()
        while self._turns and self._turns[0] is not files and (
                now - self._turns[0].began > self.keep or self._used() + size > self.budget):
            await self._drop(self._turns.popleft())
        if self._used() + size > self.budget:
            raise StorageError("There is no room to keep this file while the server's storage is unavailable.",
                               f"scratch budget of {self.budget} bytes: {self._used()} used, {size} more asked")
        if files is None:
            files = _TurnFiles(await self._directory())
            self._turns.append(files)
        files.bytes += size
        return files

    def _used(self) -> int:
        return sum(t.bytes for t in self._turns)

    async def _directory(self) -> Path:
        try:
            if self.root is None:
                base = self.base if self.base is not None else _memory_dir()
                self.root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="hugginggpt-scratch-", dir=base))
            return self.root / str(next(self._count))
        except OSError as e:
            raise StorageError("There is no room to keep this file while the server's storage is unavailable.",
                               f"cannot make a scratch directory: {e}") from e

    async def _drop(self, files: _TurnFiles) -> None:
        await asyncio.to_thread(shutil.rmtree, files.directory, True)
        log.info("removed the scratch files of a turn answered without the store (%d bytes)", files.bytes)


def _memory_dir() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


class _ScratchMedia(MediaStore):
    """A :class:`MediaStore` in one turn's scratch directory, within the space's budget."""

    def __init__(self, space: ScratchSpace) -> None:
        super().__init__(Path(tempfile.gettempdir()))  # the real directory is known at the first file
        self.space = space
        self._files: _TurnFiles | None = None

    async def put(self, data: bytes, mime: str) -> Path:
        """See :meth:`MediaStore.put`; the turn's directory is made at its first file.

        Raises:
            StorageError: no room in the budget, or the scratch file system refused the file.
        """
        self._files = await self.space.reserve(self._files, len(data))
        self.root = self._files.directory
        self.dir = self.root / "media"
        return await super().put(data, mime)


class KeepOrFail:
    """A :class:`pipeline.types.ResourceSink` over ``sink`` whose storage failure fails only the task
    whose output it is: the :class:`StorageError` becomes an :class:`ExpertError` (reason
    ``"too_large"``, not retried on another route) with a sentence saying the output could not be
    kept; the run goes on with the other tasks. The failure is logged by the executor."""

    def __init__(self, sink: ResourceSink) -> None:
        self.sink = sink

    async def add(
        self, data: bytes, *, kind: Modality, mime: str, origin: str, description: str, name: str | None = None
    ) -> Resource:
        """See :meth:`pipeline.types.ResourceSink.add`.

        Raises:
            ExpertError: the file could not be kept (``str(exc)`` has the storage's detail).
        """
        try:
            return await self.sink.add(data, kind=kind, mime=mime, origin=origin, description=description, name=name)
        except StorageError as e:
            condition = storage_condition(e)
            raise ExpertError(f"{condition}, so its output could not be kept.",
                              f"{len(data)} bytes of {mime} not kept: {e}", reason="too_large") from e
