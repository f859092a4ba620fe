"""The media store: every file the bot keeps (user uploads, generated media) lives here.

Files are stored under ``<root>/media/<h[:2]>/<h>.<ext>`` where ``h`` is the SHA-256 hex digest of
the content, so identical content is stored once and a name never changes meaning. Writes are
atomic (temporary file in the same directory, ``fsync``, ``os.replace``) so a cancelled or
interrupted write never leaves a half-written file under a final name.

User uploads are checked here before anything else sees them (:func:`inspect_upload`): the type is
sniffed from the content (magic bytes, Pillow, ``ffprobe``), never taken from the user's label.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import json
import logging
import mimetypes
import os
import re
import tempfile
import threading
import uuid
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from .errors import InputError, StorageError
from .types import Modality, Resource

log = logging.getLogger(__name__)

MiB = 1024 * 1024
_CHUNK = 1 * MiB

# MIME type -> file extension for every type we accept or generate.
EXTENSIONS: dict[str, str] = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/bmp": ".bmp",
    "image/tiff": ".tiff",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/flac": ".flac",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "audio/mp4": ".m4a",
    "audio/webm": ".weba",
    "video/mp4": ".mp4",
    "video/webm": ".webm",
    "video/ogg": ".ogv",
    "video/quicktime": ".mov",
    "video/x-msvideo": ".avi",
    "video/x-matroska": ".mkv",
    "text/plain": ".txt",
    "application/json": ".json",
}

_PIL_MIME = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "TIFF": "image/tiff",
}


def extension_for(mime: str) -> str:
    """File extension (with dot) for ``mime``; ``".bin"`` if unknown."""
    mime = mime.split(";")[0].strip().lower()
    return EXTENSIONS.get(mime) or mimetypes.guess_extension(mime) or ".bin"


# ----------------------------------------------------------------------------------------------
# Sniffing


@dataclass(frozen=True)
class Sniffed:
    """What the first bytes of a file say it is.

    Attributes:
        kind: ``"image" | "audio" | "video"``; for containers that hold either (MP4, WebM, Ogg)
            the first guess, settled by ``ffprobe``.
        mime: MIME type.
        container: ``True`` for containers that may hold audio or video.
    """

    kind: Modality
    mime: str
    container: bool = False


def sniff(data: bytes) -> Sniffed | None:
    """Identify image/audio/video content from its magic bytes; ``None`` if it is none of these.

    Sources: the file signatures of PNG, JPEG, GIF, WebP, BMP, TIFF, RIFF WAVE/AVI, FLAC, Ogg,
    MP3 (ID3 tag or MPEG frame sync), ISO BMFF (``ftyp``) and Matroska/WebM (EBML).
    """
    head = data[:64]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("image", "image/png")
    if head.startswith(b"\xff\xd8\xff"):
        return Sniffed("image", "image/jpeg")
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return Sniffed("image", "image/gif")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Sniffed("image", "image/webp")
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return Sniffed("audio", "audio/wav")
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return Sniffed("video", "video/x-msvideo")
    if head[:2] == b"BM" and len(data) > 26:
        return Sniffed("image", "image/bmp")
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return Sniffed("image", "image/tiff")
    if head[:4] == b"fLaC":
        return Sniffed("audio", "audio/flac")
    if head[:4] == b"OggS":
        return Sniffed("audio", "audio/ogg", container=True)
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0 and head[1] & 0x06):
        return Sniffed("audio", "audio/mpeg")
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"M4A ", b"M4B "):
            return Sniffed("audio", "audio/mp4", container=True)
        if brand == b"qt  ":
            return Sniffed("video", "video/quicktime", container=True)
        return Sniffed("video", "video/mp4", container=True)
    if head[:4] == b"\x1a\x45\xdf\xa3":
        mime = "video/webm" if b"webm" in data[:64] else "video/x-matroska"
        return Sniffed("video", mime, container=True)
    return None


def _looks_like(data: bytes) -> str:
    """A short name for well-known non-media content, for error messages."""
    head = data[:1024].lstrip().lower()
    if head.startswith(b"%pdf"):
        return "a PDF document"
    if head.startswith(b"pk\x03\x04"):
        return "a ZIP archive"
    if head.startswith((b"<!doctype html", b"<html")) or b"<html" in head[:256]:
        return "an HTML page"
    if head.startswith(b"<?xml") or head.startswith(b"<svg"):
        return "an XML/SVG document"
    if head.startswith((b"{", b"[")):
        return "JSON text"
    try:
        data[:4096].decode("utf-8")
        return "plain text"
    except UnicodeDecodeError:
        return "a file of an unsupported type"


def _declared_kind(name: str | None, declared_mime: str | None) -> tuple[str | None, str | None]:
    """Kind the user's label claims (``image|audio|video`` or ``None``) and where it came from."""
    if declared_mime:
        major = declared_mime.split("/")[0].strip().lower()
        if major in ("image", "audio", "video"):
            return major, f"type {declared_mime}"
    if name:
        guessed = mimetypes.guess_type(name)[0]
        if guessed:
            major = guessed.split("/")[0]
            if major in ("image", "audio", "video"):
                return major, f"extension {Path(name).suffix}"
    return None, None


# ----------------------------------------------------------------------------------------------
# Inspection of uploads


@dataclass(frozen=True)
class Inspected:
    """A checked upload.

    Attributes:
        kind: ``"image" | "audio" | "video"``.
        mime: MIME type sniffed from the content.
        size: bytes.
        description: one line, e.g. ``"image chelsea.png, 451x300 pixels"``.
        width, height: pixels (images and videos).
        duration: seconds (audio and video).
    """

    kind: Modality
    mime: str
    size: int
    description: str
    width: int | None = None
    height: int | None = None
    duration: float | None = None


def _check_image(data: bytes, label: str) -> tuple[str, int, int]:
    """Decode an image fully; returns ``(mime, width, height)``. Raises InputError."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                im.verify()
            with Image.open(io.BytesIO(data)) as im:
                im.load()
                fmt = im.format or ""
                w, h = im.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InputError(
            f"The image {label} has too many pixels to process safely.", f"decompression bomb check: {exc}"
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise InputError(
            f"The image {label} could not be decoded; it may be truncated or corrupt.", f"Pillow: {exc!r}"
        ) from exc
    return _PIL_MIME.get(fmt, f"image/{fmt.lower() or 'unknown'}"), w, h


async def ffprobe(path: Path, timeout: float = 20.0) -> dict:
    """Run ``ffprobe`` on ``path`` and return its JSON (``format`` and ``streams``).

    Raises:
        InputError: ffprobe cannot read the file.
        StorageError: ffprobe is not installed.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            "ffprobe", "-v", "error", "-print_format", "json", "-show_format", "-show_streams", str(path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError as exc:  # pragma: no cover - environment problem
        raise StorageError("The media tools (ffprobe) are not installed on the bot's host.", str(exc)) from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise InputError("The file could not be read as audio or video.", f"ffprobe: {err.decode(errors='replace')[:300]}")
    try:
        return json.loads(out or b"{}")
    except json.JSONDecodeError as exc:
        raise InputError("The file could not be read as audio or video.", f"ffprobe output: {exc}") from exc


async def probe_bytes(data: bytes, suffix: str = "") -> dict:
    """:func:`ffprobe` for in-memory data (written to a temporary file first; MP4 needs seeking)."""

    def write() -> str:
        fd, name = tempfile.mkstemp(prefix="hg-probe-", suffix=suffix)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return name

    name = await asyncio.to_thread(write)
    try:
        return await ffprobe(Path(name))
    finally:
        await asyncio.to_thread(_unlink_quiet, Path(name))


def _unlink_quiet(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _duration(info: dict, stream: dict) -> float | None:
    for value in (stream.get("duration"), info.get("format", {}).get("duration")):
        try:
            d = float(value)
        except (TypeError, ValueError):
            continue
        if d > 0:
            return d
    return None


async def inspect_upload(
    data: bytes, name: str | None, declared_mime: str | None, *, max_bytes: int
) -> Inspected:
    """Check a user's file and describe it.

    Checks, in order: not empty; at most ``max_bytes``; the content is an image, audio or video
    (sniffed from the bytes, HTML/text/PDF/ZIP refused); it decodes (Pillow ``verify`` and ``load``
    for images, an ``ffprobe`` stream with a duration for audio/video); the user's label (MIME type
    or file extension) does not claim another kind than the content (a ``.png`` that is really a
    JPEG is fine: the content wins).

    Args:
        data: the file's bytes.
        name: the user's file name, if any.
        declared_mime: the MIME type the platform or user gave, if any.
        max_bytes: size limit in bytes (``[storage] max_file_bytes``).

    Returns:
        :class:`Inspected`.

    Raises:
        InputError: with one sentence for the user when any check fails.
    """
    label = name or "file"
    if not data:
        raise InputError(f"The {label} is empty.")
    if len(data) > max_bytes:
        raise InputError(
            f"The {label} is {len(data) / MiB:.1f} MiB, more than the limit of {max_bytes / MiB:g} MiB.",
            f"size {len(data)} > max_bytes {max_bytes}",
        )
    sniffed = sniff(data)
    if sniffed is None:
        what = _looks_like(data)
        raise InputError(
            f"The {label} is {what}, not an image, audio or video file.",
            f"unsupported content; declared {declared_mime!r}",
        )
    kind: Modality = sniffed.kind
    mime = sniffed.mime
    width = height = None
    duration = None
    if kind == "image":
        mime, width, height = await asyncio.to_thread(_check_image, data, label)
    else:
        try:
            info = await probe_bytes(data, suffix=extension_for(mime))
        except InputError as exc:
            raise InputError(f"The {label} could not be read as {kind}; it may be truncated or corrupt.", str(exc)) from exc
        streams = info.get("streams", [])
        video = [s for s in streams if s.get("codec_type") == "video" and s.get("disposition", {}).get("attached_pic") != 1]
        audio = [s for s in streams if s.get("codec_type") == "audio"]
        if video:
            kind = "video"
            if mime.startswith("audio/"):
                mime = {"audio/ogg": "video/ogg", "audio/mp4": "video/mp4"}.get(mime, mime)
            stream = video[0]
            width, height = stream.get("width"), stream.get("height")
        elif audio:
            kind = "audio"
            if mime.startswith("video/"):
                mime = {"video/mp4": "audio/mp4", "video/webm": "audio/webm", "video/quicktime": "audio/mp4"}.get(
                    mime, mime
                )
            stream = audio[0]
        else:
            raise InputError(f"The {label} has no audio or video stream.", f"ffprobe streams: {streams}")
        duration = _duration(info, stream)
        if duration is None:
            raise InputError(f"The {label} could not be decoded: its length is unknown.", f"ffprobe: {info.get('format')}")

    claimed, source = _declared_kind(name, declared_mime)
    if claimed and claimed != kind and not (sniffed.container and {claimed, kind} == {"audio", "video"}):
        raise InputError(
            f"The {label} is labelled as {claimed} ({source}) but its content is {_a(kind)} {kind} file.",
            f"declared {declared_mime!r} name {name!r}, sniffed {mime}",
        )

    title = f"{kind} {name}" if name else f"{kind} ({mime.split('/')[1]})"
    parts = [title]
    if duration is not None:
        parts.append(f"{duration:.1f} s")
    if width and height:
        parts.append(f"{width}x{height} pixels")
    return Inspected(kind, mime, len(data), ", ".join(parts), width, height, duration)


def _a(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


# ----------------------------------------------------------------------------------------------
# The store


class MediaStore:
    """Content-addressed file store under ``root/media``.

    Args:
        root: the data directory (``[storage] data_dir``); created on first write.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "media"

    def path_for(self, data: bytes, mime: str) -> Path:
        """Final path of ``data``: ``media/<h[:2]>/<h><ext>`` with ``h`` its SHA-256 hex digest."""
        digest = hashlib.sha256(data).hexdigest()
        return self.dir / digest[:2] / f"{digest}{extension_for(mime)}"

    async def put(self, data: bytes, mime: str) -> Path:
        """Store ``data`` and return its absolute path.

        Atomic and idempotent: the bytes go to a temporary file in the target directory, are
        flushed with ``fsync`` and renamed over the final name (``os.replace``); storing the same
        content again returns the existing path. The blocking I/O runs in a worker thread. If the
        caller is cancelled, the worker stops between chunks and removes its temporary file before
        the cancellation propagates.

        Raises:
            StorageError: the disk is full (ENOSPC) or the directory is not writable.
        """
        final = self.path_for(data, mime)
        stop = threading.Event()
        worker = asyncio.ensure_future(asyncio.to_thread(self._write, data, final, stop))
        try:
            return await asyncio.shield(worker)
        except asyncio.CancelledError:
            stop.set()
            try:
                await worker
            except BaseException:  # noqa: BLE001 - the write was abandoned; cancellation wins
                pass
            raise

    def _write(self, data: bytes, final: Path, stop: threading.Event) -> Path:
        if final.exists() and final.stat().st_size == len(data):
            return final.resolve()
        tmp = final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"
        done = False
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                for start in range(0, len(data), _CHUNK):
                    if stop.is_set():
                        raise asyncio.CancelledError()
                    chunk = view[start : start + _CHUNK]
                    while chunk:
                        n = os.write(fd, chunk)
                        chunk = chunk[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
            if stop.is_set():
                raise asyncio.CancelledError()
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

    async def add_user_file(
        self, incoming_bytes: bytes, name: str | None, declared_mime: str | None, max_bytes: int
    ) -> Resource:
        """Check a user's file with :func:`inspect_upload`, store it and return it (origin ``"user"``).

        Raises:
            InputError: the file is unusable (one sentence for the user).
            StorageError: it could not be saved.
        """
        info = await inspect_upload(incoming_bytes, name, declared_mime, max_bytes=max_bytes)
        return await self.add(
            incoming_bytes, kind=info.kind, mime=info.mime, origin="user", description=info.description, name=name
        )
