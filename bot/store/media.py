"""The media store: every file the bot keeps (user uploads, generated media) lives here.

Files are stored under ``<root>/media/<h[:2]>/<h>.<ext>`` where ``h`` is the SHA-256 hex digest of
the content, so identical content is stored once and a name never changes meaning. Writes are
atomic (temporary file in the same directory, ``fsync``, ``os.replace``) so a cancelled or
interrupted write never leaves a half-written file under a final name. Hashing and the whole
write (stat, open, write, ``fsync``, rename) run as one call in the event loop's default executor:
one hop off the loop per file rather than one per system call, so the loop pays about the same
small cost for a 10 MB video as for an icon.

While a conversation store (:class:`bot.store.sql.store.SQLStore`) is open on the same
directory, it is this store's :attr:`MediaStore.ledger`: every write, whoever makes it
(conversation files, the files of ``hugginggpt run``), is first recorded there and checked against
``[storage] max_media_bytes`` (:class:`bot.store.sql.retention.Ledger`), so the quota holds for
every command and process.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
import re
import threading
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from pipeline.media import extension_for
from pipeline.types import Modality, Resource

from ..errors import StorageError

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_CHUNK = 1 * MiB
"""Bytes per write call: a cancelled write stops at the next chunk boundary."""

_HASH_IN_THREAD = 64 * 1024
"""Bytes from which the SHA-256 of a file is computed in a worker thread (about 0.1 ms per 64 KiB
on the loop otherwise); smaller files are hashed in place, cheaper than the hop."""


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove temporary media file %s: %s", path, exc)


def _create_0644(path: str, flags: int) -> int:
    """``opener`` for :func:`open`: new files get mode 0644 (before the umask)."""
    return os.open(path, flags, 0o644)


class _Stopped(Exception):
    """A write abandoned because its caller was cancelled (raised in the worker thread)."""


class MediaLedger(Protocol):
    """Records media writes and enforces the quota (:class:`bot.store.sql.retention.Ledger`)."""

    async def reserve(self, path: Path, size: int) -> bool:  # pragma: no cover - protocol
        """Record ``size`` bytes about to be written at ``path`` (making room under the quota);
        return whether the record is new. Raises :class:`StorageError` when it cannot fit."""
        ...

    async def release(self, path: Path) -> None:  # pragma: no cover - protocol
        """Drop a new record after its write failed."""
        ...


class MediaStore:
    """Content-addressed file store under ``root/media``.

    Args:
        root: the data directory (``[storage] data_dir``); created on first write.

    Attributes:
        ledger: where writes are recorded and the quota enforced (set by an open conversation
            store, :class:`bot.store.sql.store.SQLStore`; ``None``: plain writes).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "media"
        self.ledger: MediaLedger | None = None

    def path_for(self, data: bytes, mime: str) -> Path:
        """Final path of ``data``: ``media/<h[:2]>/<h><ext>`` with ``h`` its SHA-256 hex digest."""
        digest = hashlib.sha256(data).hexdigest()
        return self.dir / digest[:2] / f"{digest}{extension_for(mime)}"

    async def put(self, data: bytes, mime: str) -> Path:
        """Store ``data`` and return its absolute path.

        Atomic and idempotent: the bytes go to a temporary file in the target directory, are
        flushed with ``fsync`` and renamed over the final name (``os.replace``); storing the same
        content again returns the existing path. The write runs as its own task, shielded from
        the caller's cancellation: if the caller is cancelled, the write stops at the next
        :data:`_CHUNK` boundary and removes its temporary file before the cancellation propagates.

        Args:
            data: the file's bytes.
            mime: its MIME type (chooses the extension, :func:`pipeline.media.extension_for`).

        Returns:
            The absolute path of the stored file.

        With a :attr:`ledger`, the file is recorded (and room made under the quota) before it is
        written, and the record is dropped again if the write fails or is cancelled.

        Raises:
            StorageError: the disk is full (ENOSPC), the directory is not writable, or the
                media quota leaves no room (from the ledger; nothing is written then).
        """
        if len(data) >= _HASH_IN_THREAD:
            final = await asyncio.to_thread(self.path_for, data, mime)
        else:
            final = self.path_for(data, mime)
        ledger = self.ledger
        new = await ledger.reserve(final, len(data)) if ledger is not None else False
        stop = threading.Event()
        worker = asyncio.ensure_future(asyncio.to_thread(_write_file, data, final, stop))
        try:
            return await asyncio.shield(worker)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                stop.set()
                try:
                    await worker
                except BaseException:  # noqa: BLE001 - the write was abandoned; cancellation wins
                    pass
            written = worker.done() and not worker.cancelled() and worker.exception() is None
            if new and ledger is not None and not written:
                try:
                    await asyncio.shield(ledger.release(final))
                except Exception as e:  # noqa: BLE001 - the write's own error is the one to report
                    log.warning("could not drop the record of %s: %s", final, e)
            raise


def _write_file(data: bytes, final: Path, stop: threading.Event) -> Path:
    """Write ``data`` to ``final`` atomically (temporary file, ``fsync``, ``os.replace``) in the
    calling (worker) thread; an existing file of the same size is kept. Returns the resolved path.

    Raises:
        _Stopped: ``stop`` was set (the caller was cancelled); the write stopped at a
            :data:`_CHUNK` boundary and its temporary file is gone.
        StorageError: the disk is full (ENOSPC) or the directory cannot be written.
    """
    try:
        if final.stat().st_size == len(data):
            return final.resolve()
    except OSError:
        pass  # not there yet (or unreadable: write it again)
    tmp = final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"
    done = False
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "xb", buffering=0, opener=_create_0644) as f:
            view = memoryview(data)
            for start in range(0, len(data), _CHUNK):
                if stop.is_set():
                    raise _Stopped()
                chunk = view[start : start + _CHUNK]
                while chunk:  # unbuffered: a write may be partial
                    chunk = chunk[f.write(chunk) :]
            os.fsync(f.fileno())
        if stop.is_set():
            raise _Stopped()
        os.replace(tmp, final)
        done = True
        return final.resolve()
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            log.error("media store full while writing %s (%d bytes)", final, len(data))
            raise StorageError(
                "The bot's media storage is full, so the file could not be saved.", f"ENOSPC writing {final}"
            ) from exc
        log.error("media store write failed for %s: %s", final, exc)
        raise StorageError("The bot could not save the file to its media storage.", f"{exc!r}") from exc
    finally:
        if not done:
            _unlink_quiet(tmp)


# ----------------------------------------------------------------------------------------------
# Resource sink for one-off runs

_ID_RE = re.compile(r"^(image|audio|video|text)-(\d+)$")


class LocalResourceSink:
    """A :class:`pipeline.types.ResourceSink` over a :class:`MediaStore`, for one-off runs.

    Ids are ``<kind>-<n>`` counted per kind (``image-1``, ``image-2``, ``audio-1``), continuing
    after the ids already taken.

    Args:
        store: where bytes go.
        prefix_counts: what is already taken: either existing :class:`Resource` objects (their ids
            are parsed) or a mapping kind -> highest number used.
        turn: turn index written into new resources (``None`` outside a conversation).

    Attributes:
        resources: every resource created through this sink, in order.
    """

    def __init__(
        self,
        store: MediaStore,
        prefix_counts: Mapping[str, int] | Iterable[Resource] | None = None,
        *,
        turn: int | None = None,
    ) -> None:
        self.store = store
        self.turn = turn
        self.resources: list[Resource] = []
        self._counts: dict[str, int] = {}
        if isinstance(prefix_counts, Mapping):
            self._counts.update({str(k): int(v) for k, v in prefix_counts.items()})
        elif prefix_counts is not None:
            for r in prefix_counts:
                m = _ID_RE.match(r.id)
                if m:
                    self._counts[m[1]] = max(self._counts.get(m[1], 0), int(m[2]))

    def _next_id(self, kind: str) -> str:
        n = self._counts.get(kind, 0) + 1
        self._counts[kind] = n
        return f"{kind}-{n}"

    async def add(
        self, data: bytes, *, kind: Modality, mime: str, origin: str, description: str, name: str | None = None
    ) -> Resource:
        """Store ``data`` and return a new :class:`Resource` (id assigned before any await)."""
        rid = self._next_id(kind)
        path = await self.store.put(data, mime)
        res = Resource(
            id=rid, kind=kind, path=path, mime=mime, size=len(data), origin=origin,
            description=description, turn=self.turn, name=name,
        )
        self.resources.append(res)
        return res
