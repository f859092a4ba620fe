"""Checks of the files users send, before anything else sees them.

The type is sniffed from the content (magic bytes, Pillow, FFmpeg's demuxers through PyAV), never taken from the
user's label; a file whose content is another kind than its label is refused.
"""

from __future__ import annotations

import asyncio
import codecs
import io
import json
import logging
import mimetypes
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from PIL import Image, UnidentifiedImageError

from pipeline.planning import MAX_TEXT_ARG
from pipeline.decoding import Decoder, DecodeError
from pipeline.media import PixelLimitError, decode_text, image_size_checked, sniff, stream_info
from pipeline.types import Modality

from .errors import InputError

log = logging.getLogger(__name__)

MiB = 1024 * 1024

_PIL_MIME = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "TIFF": "image/tiff",
}


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
    try:  # JSON is text too: bytes that are not UTF-8 are neither, whatever their first byte
        codecs.getincrementaldecoder("utf-8")().decode(data[:4096], final=False)  # a character cut at 4096 is fine
    except UnicodeDecodeError:
        return "of a kind I cannot read"
    return "JSON text" if head.startswith((b"{", b"[")) else "plain text"


TEXT_TYPES: dict[str, str] = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
}
"""Extensions of the text files users may attach (their content becomes a text resource)."""

def _text_label(name: str | None, declared_mime: str | None) -> str | None:
    """The text MIME type the user's label claims (``None``: the label says no text type, or its
    declared type says image, audio or video, which wins over the name)."""
    if (declared_mime or "").split("/")[0].strip().lower() in ("image", "audio", "video"):
        return None
    suffix = Path(name).suffix.lower() if name else ""
    if suffix in TEXT_TYPES:
        return TEXT_TYPES[suffix]
    mime = (declared_mime or "").split(";")[0].strip().lower()
    if mime.startswith("text/") and mime not in ("text/html", "text/xml"):
        return "text/markdown" if mime == "text/x-markdown" else mime
    if mime == "application/json":
        return mime
    return None


def _check_text(data: bytes, label: str, mime: str, max_bytes: int) -> tuple[str, int, int]:
    """Decode a text file (UTF-8, a UTF-8 or UTF-16 byte-order mark honoured) and count it.

    Returns:
        ``(mime, characters, lines)``.

    Raises:
        InputError: over ``max_bytes``, not UTF-8, or binary (NUL or many control characters).
    """
    if len(data) > max_bytes:
        raise InputError(
            f"The {label} is {len(data) / 1024:,.0f} KiB of text, more than the limit of {max_bytes / 1024:,.0f} KiB for text files.",
            f"text size {len(data)} > [storage] max_text_file_bytes {max_bytes}",
        )
    utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))
    if not utf16 and b"\x00" in data[:65536]:
        raise InputError(f"The {label} is a binary file, not text.", "NUL bytes in a text-labelled file")
    try:
        text = decode_text(data)
    except UnicodeDecodeError as e:
        raise InputError(
            f"The {label} is not UTF-8 text (byte {e.start + 1} cannot be read); save it as UTF-8 and send it again.",
            f"text decode: {e}",
        ) from None
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f")
    if "\x00" in text or controls > max(2, len(text) // 100):
        raise InputError(f"The {label} is a binary file, not text.", f"{controls} control characters")
    if mime == "application/json":
        try:
            json.loads(text)
        except ValueError:
            mime = "text/plain"  # named .json but not JSON: still text the user can have read
    return mime, len(text), text.count("\n") + (0 if text.endswith("\n") or not text else 1)


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


@dataclass(frozen=True)
class Inspected:
    """A checked upload.

    Attributes:
        kind: ``"image" | "audio" | "video" | "text"``.
        mime: MIME type sniffed from the content (for text: from the label, JSON checked).
        size: bytes.
        description: one line, e.g. ``"image chelsea.png, 451x300 pixels"``.
        width, height: pixels (images and videos).
        duration: seconds (audio and video).
        characters: characters of a text file.
    """

    kind: Modality
    mime: str
    size: int
    description: str
    width: int | None = None
    height: int | None = None
    duration: float | None = None
    characters: int | None = None


def _check_image(data: bytes, label: str, max_pixels: int) -> tuple[str, int, int]:
    """Check an image's declared size against ``max_pixels`` from its header, then decode it
    fully; returns ``(mime, width, height)``. Raises InputError."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image_size_checked(data, max_pixels)  # before a single pixel is decoded
            with Image.open(io.BytesIO(data)) as im:
                im.verify()
            with Image.open(io.BytesIO(data)) as im:
                im.load()
                fmt = im.format or ""
                w, h = im.size
    except PixelLimitError as exc:
        shown = f" ({exc.size[0]}x{exc.size[1]})" if exc.size else ""
        raise InputError(
            f"The image {label} has too many pixels{shown} to process safely; the limit is "
            f"{max_pixels / 1e6:g} million pixels ([inference] max_image_pixels).", f"pixel limit: {exc}",
        ) from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InputError(
            f"The image {label} has too many pixels to process safely.", f"decompression bomb check: {exc}"
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise InputError(
            f"The image {label} could not be decoded; it may be truncated or corrupt.", f"Pillow: {exc!r}"
        ) from exc
    return _PIL_MIME.get(fmt, f"image/{fmt.lower() or 'unknown'}"), w, h


async def probe(source: bytes | Path, decoder: Decoder, timeout: float | None = None) -> dict:
    """Describe an audio or video file's streams with the FFmpeg libraries (PyAV,
    :func:`pipeline.media.stream_info`) in a worker process of ``decoder``: no ``ffprobe``
    process, no temporary file, and a crafted file cannot hold the service.

    Args:
        source: the file's bytes, or its path.
        decoder: the worker processes.
        timeout: seconds to wait for the probe (``None``: the decoder's).

    Returns:
        :func:`pipeline.media.stream_info`'s description.

    Raises:
        InputError: the FFmpeg libraries cannot read it, or the probe exceeds ``timeout`` or the
            decoder's memory ceiling.
    """
    try:
        return await decoder.run(stream_info, source, what="the file", timeout=timeout)
    except DecodeError as exc:
        if exc.reason == "timeout":
            raise InputError("The file could not be read as audio or video: inspecting it took too long.", str(exc)) from None
        raise InputError("The file could not be read as audio or video.", str(exc)) from None


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
    data: bytes,
    name: str | None,
    declared_mime: str | None,
    *,
    max_bytes: int,
    max_pixels: int,
    max_text_bytes: int,
    decoder: Decoder | None = None,
) -> Inspected:
    """Check a user's file and describe it.

    Checks, in order: not empty; at most ``max_bytes``; the content is an image, audio or video
    (sniffed from the bytes), or a text file (``.txt``, ``.md``, ``.csv``, ``.tsv``, ``.json``, or
    a ``text/*`` type, or unlabelled text: UTF-8 or UTF-16 with a byte-order mark, no binary
    content, at most ``max_text_bytes``); HTML, XML, PDF and ZIP are refused; it decodes (Pillow ``verify`` and ``load``
    for images, an audio or video stream with a duration found by :func:`probe`'s worker process, a video's
    frames within ``max_pixels``); the user's label (MIME type
    or file extension) does not claim another kind than the content (a ``.png`` that is really a
    JPEG is fine: the content wins).

    Args:
        data: the file's bytes.
        name: the user's file name, if any.
        declared_mime: the MIME type the platform or user gave, if any.
        max_bytes: size limit in bytes (``[storage] max_file_bytes``).
        max_pixels: image limit in pixels, width × height, checked from the header before the
            image is decoded (``[inference] max_image_pixels``).
        max_text_bytes: text-file limit in bytes (``[storage] max_text_file_bytes``).
        decoder: the worker processes that probe audio and video (``None``: a decoder of its own,
            closed after); a video's frames are checked against ``max_pixels`` too.

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
    claimed_text = _text_label(name, declared_mime)
    utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))  # its byte-order mark looks like an MP3 frame
    sniffed = None if claimed_text and utf16 else sniff(data)
    if sniffed is None:
        return await _inspect_unsniffed(data, name, declared_mime, claimed_text, utf16, max_text_bytes)
    media = await _inspect_media(data, label, sniffed.kind, sniffed.mime, max_pixels, decoder)
    claimed, source = _declared_kind(name, declared_mime)
    if claimed and claimed != media.kind and not (sniffed.container and {claimed, media.kind} == {"audio", "video"}):
        raise InputError(
            f"The {label} is labelled as {claimed} ({source}) but its content is {_a(media.kind)} {media.kind} file.",
            f"declared {declared_mime!r} name {name!r}, sniffed {media.mime}",
        )
    return media.inspected(name, len(data))


class _Media(NamedTuple):
    """What the content of an image, audio or video upload turned out to be."""

    kind: Modality
    mime: str
    width: int | None
    height: int | None
    duration: float | None

    def inspected(self, name: str | None, size: int) -> Inspected:
        """The :class:`Inspected` with its one-line description."""
        parts = [f"{self.kind} {name}" if name else f"{self.kind} ({self.mime.split('/')[1]})"]
        if self.duration is not None:
            parts.append(f"{self.duration:.1f} s")
        if self.width and self.height:
            parts.append(f"{self.width}x{self.height} pixels")
        return Inspected(self.kind, self.mime, size, ", ".join(parts), self.width, self.height, self.duration)


async def _inspect_unsniffed(data: bytes, name: str | None, declared_mime: str | None, claimed_text: str | None,
                             utf16: bool, max_text_bytes: int) -> Inspected:
    """An upload that is no image, audio or video: a text file when labelled as one (or not
    labelled at all), else refused with what it looks like."""
    label = name or "file"
    what = "plain text" if utf16 and claimed_text else _looks_like(data)
    media_label, source = _declared_kind(name, declared_mime)
    textual = what in ("plain text", "JSON text")
    unlabelled = not (name and Path(name).suffix) and (declared_mime or "application/octet-stream").startswith(
        "application/octet-stream")
    if (textual and (claimed_text or unlabelled)) or (claimed_text and what == "of a kind I cannot read"):
        # the label says text (or nothing): decode it all; a sentence says why if it is not text
        mime, chars, lines = await asyncio.to_thread(_check_text, data, label, claimed_text or "text/plain", max_text_bytes)
        title = f"text file {name}" if name else "text file"
        cut = f"; tasks read its first {MAX_TEXT_ARG:,} characters" if chars > MAX_TEXT_ARG else ""
        return Inspected("text", mime, len(data),
                         f"{title}, {chars:,} characters, {lines:,} line{'s' if lines != 1 else ''}{cut}", characters=chars)
    if textual and media_label:
        raise InputError(f"The {label} is labelled as {media_label} ({source}) but its content is {what}.",
                         f"declared {declared_mime!r} name {name!r}")
    raise InputError(
        f"The {label} is {what}, not an image, audio, video or text file.",
        f"unsupported content; declared {declared_mime!r}",
    )


async def _inspect_media(data: bytes, label: str, kind: Modality, mime: str, max_pixels: int,
                         decoder: Decoder | None) -> _Media:
    """An image (Pillow, in a thread: bounded by ``max_pixels`` before decoding), or audio or
    video (:func:`_inspect_stream`, in a worker of ``decoder`` or of a decoder of its own)."""
    if kind == "image":
        mime, width, height = await asyncio.to_thread(_check_image, data, label, max_pixels)
        return _Media("image", mime, width, height, None)
    if decoder is None:
        async with Decoder(max_pixels=max_pixels) as own:
            return await _inspect_stream(data, label, kind, mime, own, max_pixels)
    return await _inspect_stream(data, label, kind, mime, decoder, max_pixels)


async def _inspect_stream(data: bytes, label: str, kind: Modality, mime: str, decoder: Decoder, max_pixels: int) -> _Media:
    """Audio or video (by its streams, :func:`pipeline.media.stream_info` in a worker of
    ``decoder``): the kind the streams show, the MIME type matched to it, the picture size of a
    video (at most ``max_pixels``) and the duration."""
    try:
        info = await decoder.run(stream_info, data, what=f"the {label}")
    except DecodeError as exc:
        if exc.reason in ("timeout", "memory", "closed"):
            raise InputError(exc.user_message, str(exc)) from None
        raise InputError(f"The {label} could not be read as {kind}; it may be truncated or corrupt.", str(exc)) from None
    streams = info.get("streams", [])
    video = [s for s in streams if s.get("codec_type") == "video" and s.get("disposition", {}).get("attached_pic") != 1]
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    width = height = None
    if video:
        kind = "video"
        if mime.startswith("audio/"):
            mime = {"audio/ogg": "video/ogg", "audio/mp4": "video/mp4"}.get(mime, mime)
        stream = video[0]
        width, height = stream.get("width"), stream.get("height")
        if (width or 0) * (height or 0) > max_pixels:
            raise InputError(f"The {label} has frames of {width}x{height} pixels, more than the limit of "
                             f"{max_pixels / 1e6:g} million pixels ([inference] max_image_pixels).",
                             f"video frame {width}x{height} > max_pixels {max_pixels}")
    elif audio:
        kind = "audio"
        if mime.startswith("video/"):
            mime = {"video/mp4": "audio/mp4", "video/webm": "audio/webm", "video/quicktime": "audio/mp4"}.get(mime, mime)
        stream = audio[0]
    else:
        raise InputError(f"The {label} has no audio or video stream.", f"streams: {streams}")
    duration = _duration(info, stream)
    if duration is None:
        raise InputError(f"The {label} could not be decoded: its length is unknown.", f"format: {info.get('format')}")
    return _Media(kind, mime, width, height, duration)


def _a(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
