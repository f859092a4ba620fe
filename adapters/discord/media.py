"""Fit generated media under Discord's upload limit, and say so when a file was changed.

Discord refuses a file above the channel's upload limit (``Interaction.filesize_limit`` /
``Guild.filesize_limit``; 10 MiB by default, Discord API docs "Uploading Files"). A file is
never dropped silently: images are re-encoded and downscaled (Pillow), audio is transcoded to a
lower Opus bitrate (ffmpeg), video is re-encoded smaller (ffmpeg, H.264); when even that cannot fit,
audio and video are trimmed, and the note returned says what happened so the message can tell the
user.
"""

from __future__ import annotations

import asyncio
import io
import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydub import AudioSegment
from pydub.exceptions import CouldntDecodeError, CouldntEncodeError
from PIL import Image

log = logging.getLogger(__name__)

MiB = 1024 * 1024


@dataclass(frozen=True)
class FittedMedia:
    """A file ready to upload, or the reason it cannot be.

    Attributes:
        data: bytes to upload (``None`` when the file could not be made small enough).
        filename: name to upload under (extension follows the new format).
        mime: MIME type of ``data``.
        note: a sentence for the user when the file was changed or left out, else ``None``.
    """

    data: bytes | None
    filename: str
    mime: str
    note: str | None = None


def human_size(n: int) -> str:
    """``n`` bytes as ``"9.5 MB"`` / ``"640 KB"`` (powers of 1024, as Discord shows limits)."""
    if n >= MiB:
        return f"{n / MiB:.1f} MB"
    return f"{max(1, round(n / 1024))} KB"


def _stem(filename: str) -> str:
    return Path(filename).stem or "file"


def fit_image(data: bytes, filename: str, limit: int) -> FittedMedia:
    """Re-encode (JPEG, or WebP when the image has transparency) and downscale until the image is
    at most ``limit`` bytes. CPU-bound: call it in a worker thread.

    Args:
        data: encoded image bytes (any format Pillow reads).
        filename: the file's name (for the new name and the note).
        limit: maximum bytes.

    Returns:
        A :class:`FittedMedia`; ``note`` says what was done and the new size in pixels.
    """
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        original = im.size
        alpha = im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info)
        work = im.convert("RGBA" if alpha else "RGB")
    fmt, ext, mime = ("WEBP", ".webp", "image/webp") if alpha else ("JPEG", ".jpg", "image/jpeg")
    size = work.size
    scale = 1.0
    out = b""
    for _ in range(12):
        img = work if scale == 1.0 else work.resize(
            (max(1, int(size[0] * scale)), max(1, int(size[1] * scale))), Image.Resampling.LANCZOS)
        for quality in (88, 75, 60):
            buf = io.BytesIO()
            img.save(buf, fmt, quality=quality, optimize=True) if fmt == "JPEG" else img.save(buf, fmt, quality=quality)
            out = buf.getvalue()
            if len(out) <= limit:
                what = f"re-encoded it as {fmt}" + (
                    f" and downscaled from {original[0]}×{original[1]} to {img.size[0]}×{img.size[1]} pixels"
                    if img.size != original else "")
                note = (f"🖼️ {filename} was {human_size(len(data))}, over the {human_size(limit)} upload limit here, "
                        f"so I {what}.")
                return FittedMedia(out, _stem(filename) + ext, mime, note)
        if min(img.size) <= 16:
            break
        scale *= max(0.3, min(0.85, math.sqrt(limit / max(1, len(out))) * 0.9))
    return FittedMedia(None, filename, mime, f"🖼️ {filename} ({human_size(len(data))}) could not be made smaller than "
                                              f"the {human_size(limit)} upload limit, so it is not attached.")


async def _run(args: list[str], data: bytes | None = None, timeout: float = 120.0) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *args, stdin=asyncio.subprocess.PIPE if data is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), timeout)
    except (asyncio.TimeoutError, TimeoutError):
        proc.kill()
        await proc.wait()
        return -1, b"", b"timeout"
    return proc.returncode or 0, out, err


async def media_duration(path: Path) -> float | None:
    """Duration in seconds from ffprobe, or ``None`` when it cannot tell."""
    code, out, _ = await _run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(path)])
    try:
        return float(out.decode().strip()) if code == 0 else None
    except ValueError:
        return None


async def _ffmpeg(src: Path, dst: Path, args: list[str]) -> bytes | None:
    code, _, err = await _run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", str(src), *args, str(dst)])
    if code != 0 or not dst.is_file():
        log.warning("ffmpeg failed on %s: %s", src.name, err.decode(errors="replace")[-500:])
        return None
    return dst.read_bytes()


def _opus(audio: AudioSegment, kbps: int) -> bytes | None:
    """Encode ``audio`` as Opus in Ogg at ``kbps`` kbit/s (pydub drives ffmpeg); ``None`` on failure."""
    buf = io.BytesIO()
    try:
        audio.export(buf, format="ogg", codec="libopus", bitrate=f"{kbps}k")
    except (CouldntEncodeError, OSError) as e:
        log.warning("could not encode audio as Opus at %d kbit/s: %s", kbps, e)
        return None
    return buf.getvalue()


def _fit_audio(data: bytes, filename: str, limit: int) -> FittedMedia:
    try:
        audio = AudioSegment.from_file(io.BytesIO(data))
    except (CouldntDecodeError, OSError, IndexError) as e:
        log.warning("could not decode audio %s: %s", filename, e)
        audio = None
    duration = len(audio) / 1000 if audio is not None else 0.0
    if audio is None or duration <= 0:
        return FittedMedia(None, filename, "audio/ogg", f"🔊 {filename} ({human_size(len(data))}) is over the "
                           f"{human_size(limit)} upload limit and could not be transcoded, so it is not attached.")
    name = _stem(filename) + ".ogg"
    kbps = min(128, int(limit * 8 * 0.9 / duration / 1000))
    while kbps >= 24:
        out = _opus(audio, kbps)
        if out is None:
            break
        if len(out) <= limit:
            return FittedMedia(out, name, "audio/ogg", f"🔊 {filename} was {human_size(len(data))}, over the "
                               f"{human_size(limit)} upload limit here, so I re-encoded it as Opus at {kbps} kbit/s.")
        kbps = int(kbps * min(0.85, limit / len(out)))
    # Last resort: 24 kbit/s and only as much of the start as fits (measured, not guessed).
    full = _opus(audio, 24)
    if full is not None:
        if len(full) <= limit:
            return FittedMedia(full, name, "audio/ogg", f"🔊 {filename} was {human_size(len(data))}, over the "
                               f"{human_size(limit)} upload limit here, so I re-encoded it as Opus at 24 kbit/s.")
        keep = duration * limit / len(full) * 0.9
        while keep >= 0.5:
            out = _opus(audio[: int(keep * 1000)], 24)
            if out is None:
                break
            if len(out) <= limit:
                return FittedMedia(out, name, "audio/ogg", f"🔊 {filename} ({duration:.0f} s) is too long for the "
                                   f"{human_size(limit)} upload limit even at a low bitrate, so only the first "
                                   f"{keep:.1f} s are attached.")
            keep *= 0.8
    return FittedMedia(None, filename, "audio/ogg", f"🔊 {filename} ({human_size(len(data))}) could not be made "
                       f"smaller than the {human_size(limit)} upload limit, so it is not attached.")


async def fit_audio(data: bytes, filename: str, limit: int) -> FittedMedia:
    """Transcode audio to Opus (Ogg) at the highest bitrate that fits ``limit`` bytes (at most
    128 kbit/s); when even 24 kbit/s is too big, keep 24 kbit/s and trim the end instead. Decoding
    and encoding go through pydub (which drives ffmpeg), in a worker thread.

    Returns:
        A :class:`FittedMedia`; ``note`` says the new bitrate, and the kept duration if trimmed.
    """
    return await asyncio.to_thread(_fit_audio, data, filename, limit)


async def fit_video(data: bytes, filename: str, limit: int) -> FittedMedia:
    """Re-encode video as H.264/AAC MP4, at most 640 pixels wide, at the bitrate that fits
    ``limit`` bytes; below 100 kbit/s, trim it instead.

    Returns:
        A :class:`FittedMedia` with a note saying what was done.
    """
    with tempfile.TemporaryDirectory(prefix="hgpt-video-") as tmp:
        src = Path(tmp) / ("in" + (Path(filename).suffix or ".mp4"))
        src.write_bytes(data)
        duration = await media_duration(src)
        dst = Path(tmp) / "out.mp4"
        name = _stem(filename) + ".mp4"
        if duration:
            budget = limit * 8 * 0.85
            kbps = int(budget / duration / 1000) - 48
            base = ["-vf", "scale='min(640,iw)':-2", "-c:v", "libx264", "-preset", "veryfast", "-c:a", "aac", "-b:a", "48k",
                    "-movflags", "+faststart"]
            if kbps >= 100:
                out = await _ffmpeg(src, dst, [*base, "-b:v", f"{kbps}k", "-maxrate", f"{kbps}k", "-bufsize", f"{2 * kbps}k"])
                if out is not None and len(out) <= limit:
                    return FittedMedia(out, name, "video/mp4", f"🎬 {filename} was {human_size(len(data))}, over the "
                                       f"{human_size(limit)} upload limit here, so I re-encoded it smaller.")
            keep = max(1.0, budget / ((300 + 48) * 1000) * 0.9)
            out = await _ffmpeg(src, dst, [*base, "-t", f"{keep:.1f}", "-b:v", "300k", "-maxrate", "300k", "-bufsize", "600k"])
            if out is not None and len(out) <= limit:
                return FittedMedia(out, name, "video/mp4", f"🎬 {filename} ({duration:.0f} s) is too long for the "
                                   f"{human_size(limit)} upload limit, so only the first {keep:.0f} s are attached.")
    return FittedMedia(None, filename, "video/mp4", f"🎬 {filename} ({human_size(len(data))}) could not be made smaller "
                       f"than the {human_size(limit)} upload limit, so it is not attached.")


async def fit_media(data: bytes, *, filename: str, mime: str, limit: int) -> FittedMedia:
    """Return the file unchanged when it fits ``limit`` bytes, else a smaller version and a note.

    Args:
        data: file bytes.
        filename: the name to upload under.
        mime: the file's (sniffed) MIME type; ``image/*``, ``audio/*``, ``video/*`` can be shrunk.
        limit: the upload limit in bytes (``Interaction.filesize_limit`` or ``Guild.filesize_limit``).

    Returns:
        A :class:`FittedMedia`. ``data`` is ``None`` only when nothing could fit; its ``note`` then
        says the file is not attached, so the caller can post that sentence.
    """
    if len(data) <= limit:
        return FittedMedia(data, filename, mime, None)
    kind = mime.split("/", 1)[0]
    try:
        if kind == "image":
            return await asyncio.to_thread(fit_image, data, filename, limit)
        if kind == "audio":
            return await fit_audio(data, filename, limit)
        if kind == "video":
            return await fit_video(data, filename, limit)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        log.warning("could not shrink %s (%s): %s", filename, mime, e)
    return FittedMedia(None, filename, mime, f"📎 {filename} ({human_size(len(data))}) is over the "
                       f"{human_size(limit)} upload limit here, so it is not attached.")


__all__ = ["FittedMedia", "fit_media", "fit_image", "fit_audio", "fit_video", "human_size", "media_duration"]
