"""Media types from content: which image, audio or video format a byte string holds.

Pure functions, no I/O but the file an audio or video probe is given: the experts use them to
check what a model returned, the service's upload checks (:mod:`bot.uploads`) and the media store
(:mod:`bot.store.media`) build on them.
"""

from __future__ import annotations

import io
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from .types import Modality

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
    "text/markdown": ".md",
    "text/csv": ".csv",
    "text/tab-separated-values": ".tsv",
    "application/json": ".json",
}

NAME_KINDS: dict[str, Modality] = {
    **dict.fromkeys(("jpg", "jpeg", "png", "gif", "webp", "bmp", "tif", "tiff"), "image"),
    **dict.fromkeys(("mp3", "wav", "ogg", "oga", "flac", "m4a", "opus"), "audio"),
    **dict.fromkeys(("mp4", "mov", "webm", "avi", "mkv", "m4v"), "video"),
    **dict.fromkeys(("txt", "md", "csv", "tsv", "json", "pdf"), "text"),
}
"""File name extension (lower case, no dot) → the kind of file a person or a plan means by a name
such as ``example.jpg`` (a name, not the content: uploads are sniffed)."""


def extension_for(mime: str) -> str:
    """File extension (with dot) for ``mime``; ``".bin"`` if unknown."""
    mime = mime.split(";")[0].strip().lower()
    return EXTENSIONS.get(mime) or mimetypes.guess_extension(mime) or ".bin"


def decode_text(data: bytes) -> str:
    """The text of a text file: UTF-8 (a byte-order mark dropped) or UTF-16 with a byte-order mark.

    Raises:
        UnicodeDecodeError: the bytes are neither.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    return data.decode("utf-8-sig")


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


# ----------------------------------------------------------------------------------------------
# Pixel limits (decompression bombs)


class PixelLimitError(ValueError):
    """An image declares more pixels than the limit; it was not decoded.

    Attributes:
        size: ``(width, height)`` in pixels as the image's header declares them, or ``None`` when
            Pillow's own hard limit (twice ``PIL.Image.MAX_IMAGE_PIXELS``) refused it first.
        limit: the largest number of pixels allowed.
    """

    def __init__(self, size: tuple[int, int] | None, limit: int) -> None:
        shown = f"{size[0]}x{size[1]} pixels" if size else "more pixels than Pillow opens"
        super().__init__(f"image of {shown} is over the limit of {limit} pixels")
        self.size, self.limit = size, limit


def check_pixels(size: tuple[int, int], limit: int) -> tuple[int, int]:
    """Return ``size`` (``(width, height)`` in pixels) if ``width * height <= limit``.

    Raises:
        PixelLimitError: over the limit.
    """
    if size[0] * size[1] > limit:
        raise PixelLimitError(size, limit)
    return size


def image_size_checked(data: bytes, limit: int) -> tuple[int, int]:
    """``(width, height)`` in pixels an encoded image declares in its header, checked against
    ``limit`` pixels before anything is decoded (decompression bombs).

    Raises:
        PixelLimitError: over ``limit`` (or over Pillow's own hard limit).
        PIL.UnidentifiedImageError, OSError: not an image Pillow can read.
    """
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return check_pixels(im.size, limit)
    except Image.DecompressionBombError as exc:
        raise PixelLimitError(None, limit) from exc


# ----------------------------------------------------------------------------------------------
# Streams of audio and video files


PROBE_OPTIONS = {"probesize": str(5 * 1024 * 1024), "analyzeduration": str(5_000_000)}
"""FFmpeg demuxer options for probing: read at most 5 MiB and 5 s of media to find the streams
(FFmpeg's ``probesize`` in bytes and ``analyzeduration`` in microseconds), so a crafted file
cannot make the probe read forever."""


def stream_info(source: bytes | Path) -> dict:
    """Describe an audio or video file's streams with the FFmpeg libraries (PyAV), blocking (the
    service runs it in a worker process, :func:`bot.uploads.probe`).

    Args:
        source: the file's bytes, or its path.

    Returns:
        The fields of ``ffprobe -show_format -show_streams`` this project reads:
        ``{"format": {"format_name", "duration"}, "streams": [{"codec_type", "duration",
        "disposition": {"attached_pic"}, "width", "height"}]}``; durations in seconds (``None``
        when unknown), sizes in pixels.

    Raises:
        DecodeError: the FFmpeg libraries cannot read it.
    """
    import av  # the FFmpeg libraries load with the first audio or video, not with every service start

    from .decoding import DecodeError

    try:
        with av.open(io.BytesIO(source) if isinstance(source, bytes) else str(source), options=PROBE_OPTIONS) as c:
            streams = []
            for st in c.streams:
                entry: dict = {"codec_type": st.type,
                               "duration": float(st.duration * st.time_base) if st.duration and st.time_base else None,
                               "disposition": {"attached_pic": int(bool(st.disposition & av.stream.Disposition.attached_pic))}}
                if st.type == "video":
                    entry.update(width=st.codec_context.width, height=st.codec_context.height)
                streams.append(entry)
            duration = c.duration / av.time_base if c.duration else None
            return {"format": {"format_name": c.format.name, "duration": duration}, "streams": streams}
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise DecodeError("The file could not be read as audio or video.", f"FFmpeg: {exc}") from None
