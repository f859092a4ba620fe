"""What a video holds that other experts can read: its sound and a few frames.

A video attachment is understood through its parts: the sound track becomes an audio resource
(speech recognition, audio classification) and frames spread over its length become image
resources (captioning, detection, visual question answering), next to the video itself (video
classification). Decoding runs with the FFmpeg libraries (PyAV) in a worker process of a
:class:`pipeline.decoding.Decoder`, bounded in time and memory; a frame over the decoder's pixel
limit (from the stream's header) is refused before anything is decoded.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import av
from PIL import Image

from .decoding import Decoder, DecodeError
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
    scale = min(1.0, max_side / max(frame.width, frame.height, 1))
    width, height = max(1, round(frame.width * scale)), max(1, round(frame.height * scale))
    image = frame.reformat(width=width, height=height, format="rgb24").to_image()  # scaled by swscale: no full-size RGB copy
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=False)
    return Frame(at=round(float(frame.time or 0.0), 2), png=buf.getvalue(), width=image.width, height=image.height)


def check_frame_size(stream: av.video.stream.VideoStream, max_pixels: int) -> None:
    """Refuse a video whose frames, as its stream's header declares them, exceed ``max_pixels``
    (width × height), before a frame is decoded (a 16000×16000 frame is 384 MB of YUV).

    Raises:
        DecodeError: over the limit (one sentence).
    """
    width, height = stream.codec_context.width, stream.codec_context.height
    if width * height > max_pixels:
        raise DecodeError(f"The video's frames are {width}x{height} pixels, more than the limit of "
                          f"{max_pixels / 1e6:g} million pixels ([inference] max_image_pixels).",
                          f"video frame {width}x{height} > max_pixels {max_pixels}", reason="too_large")


def _frames(data: bytes, count: int, max_side: int, max_pixels: int) -> list[Frame]:
    with av.open(io.BytesIO(data)) as container:
        if not container.streams.video:
            return []
        stream = container.streams.video[0]
        check_frame_size(stream, max_pixels)
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


def extract_parts(data: bytes, *, max_pixels: int, frames: int = 3, max_sound_seconds: float = 600.0,
                  max_side: int = 1024) -> VideoParts:
    """The sound track and ``frames`` evenly spread frames of the video ``data`` (blocking, in
    the calling process: :func:`video_parts` runs it in a worker).

    Args:
        data: the video file's bytes (any container and codec FFmpeg decodes).
        frames: how many frames, taken at the middle of ``frames`` equal slices of the video.
        max_sound_seconds: seconds of sound kept at most (the rest is cut, ``sound_cut``).
        max_side: pixels, longest side of a frame (larger frames are scaled down).
        max_pixels: pixels, the largest frame decoded (width × height, from the stream's header).

    Returns:
        :class:`VideoParts`.

    Raises:
        DecodeError: FFmpeg cannot read the video, or its frames are over ``max_pixels`` (one
            sentence; a :class:`ValueError`).
    """
    try:
        sound, seconds, cut = _sound(data, max_sound_seconds)
        return VideoParts(sound=sound, sound_seconds=round(seconds, 2), sound_cut=cut,
                          frames=_frames(data, frames, max_side, max_pixels))
    except av.error.FFmpegError as e:
        raise DecodeError(f"The video could not be decoded ({e.__class__.__name__}).", repr(e)) from None


async def video_parts(data: bytes, *, decoder: Decoder, timeout: float | None = None,
                      what: str = "the video", **options: float) -> VideoParts:
    """:func:`extract_parts` in a worker process of ``decoder`` (its pixel limit applies), given at
    most ``timeout`` seconds (``None``: the decoder's).

    Raises:
        DecodeError: FFmpeg cannot read the video, its frames are over the pixel limit, or reading
            it took longer than ``timeout`` or more memory than the decoder's ceiling (one sentence;
            ``reason`` says which; a :class:`ValueError`).
    """
    return await decoder.run(_extract, data, {**options, "max_pixels": decoder.max_pixels}, timeout=timeout, what=what)


def _extract(data: bytes, options: dict[str, float]) -> VideoParts:
    return extract_parts(data, **options)  # type: ignore[arg-type]


WHY_UNREAD = {"timeout": "it took too long to decode", "memory": "decoding it needs more memory than allowed",
              "too_large": "its frames have more pixels than allowed", "closed": "the server is shutting down"}
"""Why a video's parts were not read, by :attr:`DecodeError.reason` (otherwise: it could not be decoded)."""


async def add_video_parts(files: Sequence[Resource], sink: ResourceSink, *, decoder: Decoder,
                          timeout: float | None = None, frames: int = 3) -> tuple[list[Resource], list[str]]:
    """Store the sound and a few frames of each video in ``files`` as resources of their own, so
    task planning can give them to audio and image tasks (a video's speech transcribed, its scenes
    captioned or searched for objects).

    Args:
        files: the files of this turn; only ``kind == "video"`` ones are read.
        sink: where the parts are stored; each part's ``origin`` is its video's id (``"video-1"``).
        decoder: the worker processes that decode (its pixel limit applies).
        timeout: seconds allowed per video (``None``: the decoder's).
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
            got = await video_parts(data, decoder=decoder, timeout=timeout, what=f"the video {video.id}", frames=frames)
        except (OSError, ValueError) as e:
            log.warning("could not read the parts of %s (%s): %s", video.id, video.path, e)
            why = WHY_UNREAD.get(getattr(e, "reason", ""), "it could not be decoded")
            notes.append(f"The sound and frames of {video.id} could not be read ({why}), so only the video itself can be used.")
            continue
        if got.sound is not None:
            cut = f", cut at {got.sound_seconds:.0f} s" if got.sound_cut else ""
            parts.append(await sink.add(got.sound, kind="audio", mime="audio/flac", origin=video.id,
                                        description=f"sound of {video.id}, {got.sound_seconds:.1f} s{cut}"))
        for frame in got.frames:
            parts.append(await sink.add(frame.png, kind="image", mime="image/png", origin=video.id,
                                        description=f"frame of {video.id} at {frame.at:.1f} s, {frame.width}x{frame.height} pixels"))
    return parts, notes
