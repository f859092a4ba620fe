"""What a video holds that other experts can read: its sound and a few frames.

A video attachment is understood through its parts: the sound track becomes an audio resource
(speech recognition, audio classification) and frames spread over its length become image
resources (captioning, detection, visual question answering), next to the video itself (video
classification). Decoding runs in process with the FFmpeg libraries (PyAV), off the event loop and
bounded in time.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import av
from PIL import Image

from .types import Resource, ResourceSink

log = logging.getLogger(__name__)

SOUND_RATE = 16_000
"""Hz: the sample rate of the extracted sound (what speech recognition models take)."""


@dataclass(frozen=True)
class Frame:
    """One frame of a video.

    Attributes:
        at: seconds from the start.
        png: the frame as PNG bytes (scaled so its longer side is at most ``max_side`` pixels).
        width, height: pixels of the PNG.
    """

    at: float
    png: bytes
    width: int
    height: int


@dataclass(frozen=True)
class VideoParts:
    """The readable parts of one video.

    Attributes:
        sound: the sound track as FLAC (mono, :data:`SOUND_RATE` Hz), or ``None`` when the video
            has no audio stream.
        sound_seconds: seconds of sound kept (at most ``max_sound_seconds``).
        sound_cut: the sound track was longer than ``max_sound_seconds`` and was cut there.
        frames: frames spread evenly over the video, in time order.
    """

    sound: bytes | None = None
    sound_seconds: float = 0.0
    sound_cut: bool = False
    frames: list[Frame] = field(default_factory=list)


def _duration(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    return container.duration / av.time_base if container.duration else 0.0


def _png(frame: av.VideoFrame, max_side: int) -> Frame:
    image = frame.to_image()
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False)
    return Frame(at=round(float(frame.time or 0.0), 2), png=buf.getvalue(), width=image.width, height=image.height)


def _frames(data: bytes, count: int, max_side: int) -> list[Frame]:
    with av.open(io.BytesIO(data)) as container:
        if not container.streams.video:
            return []
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        length = _duration(container, stream)
        out: list[Frame] = []
        for i in range(count):
            target = length * (i + 0.5) / count
            if stream.time_base is not None:
                container.seek(int(target / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                if frame.time is None or frame.time + 1e-3 >= target or frame.time >= length:
                    if not out or frame.time != out[-1].at:
                        out.append(_png(frame, max_side))
                    break
        return out


def _sound(data: bytes, max_seconds: float) -> tuple[bytes | None, float, bool]:
    with av.open(io.BytesIO(data)) as container:
        if not container.streams.audio:
            return None, 0.0, False
        resampler = av.AudioResampler(format="s16", layout="mono", rate=SOUND_RATE)
        out_buf = io.BytesIO()
        samples, limit, cut = 0, int(max_seconds * SOUND_RATE), False
        with av.open(out_buf, "w", format="flac") as sink:
            encoder = sink.add_stream("flac", rate=SOUND_RATE, layout="mono")
            for frame in container.decode(container.streams.audio[0]):
                for piece in resampler.resample(frame):
                    if samples + piece.samples > limit:
                        cut = True
                        break
                    samples += piece.samples
                    sink.mux(encoder.encode(piece))
                if cut:
                    break
            sink.mux(encoder.encode(None))
        return (out_buf.getvalue() if samples else None), samples / SOUND_RATE, cut


def extract_parts(data: bytes, *, frames: int = 3, max_sound_seconds: float = 600.0, max_side: int = 1024) -> VideoParts:
    """The sound track and ``frames`` evenly spread frames of the video ``data`` (blocking).

    Args:
        data: the video file's bytes (any container and codec FFmpeg decodes).
        frames: how many frames, taken at the middle of ``frames`` equal slices of the video.
        max_sound_seconds: seconds of sound kept at most (the rest is cut, ``sound_cut``).
        max_side: pixels, longest side of a frame (larger frames are scaled down).

    Returns:
        :class:`VideoParts`.

    Raises:
        ValueError: FFmpeg cannot read the video (one sentence).
    """
    try:
        sound, seconds, cut = _sound(data, max_sound_seconds)
        return VideoParts(sound=sound, sound_seconds=round(seconds, 2), sound_cut=cut, frames=_frames(data, frames, max_side))
    except av.error.FFmpegError as e:
        raise ValueError(f"The video could not be decoded ({e.__class__.__name__}).") from e


async def video_parts(data: bytes, *, timeout: float = 60.0, **options: float) -> VideoParts:
    """:func:`extract_parts` off the event loop, given at most ``timeout`` seconds.

    Raises:
        ValueError: FFmpeg cannot read the video, or reading it took longer than ``timeout``.
    """
    try:
        return await asyncio.wait_for(asyncio.to_thread(extract_parts, data, **options), timeout)  # type: ignore[arg-type]
    except TimeoutError:
        raise ValueError(f"Reading the video's sound and frames took longer than {timeout:g} s.") from None


async def add_video_parts(files: Sequence[Resource], sink: ResourceSink, *, timeout: float = 60.0,
                          frames: int = 3) -> tuple[list[Resource], list[str]]:
    """Store the sound and a few frames of each video in ``files`` as resources of their own, so
    task planning can give them to audio and image tasks (a video's speech transcribed, its scenes
    captioned or searched for objects).

    Args:
        files: the files of this turn; only ``kind == "video"`` ones are read.
        sink: where the parts are stored; each part's ``origin`` is its video's id (``"video-1"``).
        timeout: seconds allowed per video.
        frames: frames per video, at the middles of equal slices of its length.

    Returns:
        ``(parts, notes)``: the new resources (sound first, then frames in time order, per video)
        and one sentence per video that could not be read (the video itself stays usable, by
        ``video-classification`` for one).
    """
    parts: list[Resource] = []
    notes: list[str] = []
    for video in (f for f in files if f.kind == "video"):
        try:
            data = await asyncio.to_thread(video.path.read_bytes)
            got = await video_parts(data, timeout=timeout, frames=frames)
        except (OSError, ValueError) as e:
            log.warning("could not read the parts of %s (%s): %s", video.id, video.path, e)
            notes.append(f"The sound and frames of {video.id} could not be read, so only the video itself can be used.")
            continue
        if got.sound is not None:
            cut = f", cut at {got.sound_seconds:.0f} s" if got.sound_cut else ""
            parts.append(await sink.add(got.sound, kind="audio", mime="audio/flac", origin=video.id,
                                        description=f"sound of {video.id}, {got.sound_seconds:.1f} s{cut}"))
        for frame in got.frames:
            parts.append(await sink.add(frame.png, kind="image", mime="image/png", origin=video.id,
                                        description=f"frame of {video.id} at {frame.at:.1f} s, {frame.width}x{frame.height} pixels"))
    return parts, notes
