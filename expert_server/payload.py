"""Request bodies as ``huggingface_hub``'s client sends them to a URL model (its ``hf-inference``
helper, ``huggingface_hub/inference/_providers/hf_inference.py``), and the media inside them.

* text tasks: JSON ``{"inputs": ..., "parameters": {...}}``;
* image and audio tasks without parameters: the raw file, ``Content-Type`` its MIME type;
* with parameters (or extra fields, as visual question answering's ``question`` and ``image``):
  JSON ``{"inputs": "<base64>", "parameters": {...}, ...}``.

Everything wrong with a body raises :class:`~expert_server.errors.BadPayload` naming the field;
an input over one of the server's limits (:class:`Limits`) raises
:class:`~expert_server.errors.TooLarge` (413), checked before it is decoded: an image's size from
its header, an audio file's duration from its container. The memory a decoded input will take is
charged (``Payload.charge``) before it is decoded, so inputs count against the memory budget from
then on (:meth:`expert_server.pool.Pool.hold`).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import BadPayload, ExpertError, TooLarge

RGB_BYTES = 16  # bytes charged per pixel of a decoded image: 3 for RGB, 12 for the float32 copy
# a pipeline's image processor makes of it before resizing, 1 for the decoder's buffers
JSON_BYTES = 3  # bytes charged per byte of a JSON body parsed: its text, the parser's buffer, the document
SAMPLE_BYTES = 8  # bytes charged per audio sample: float32, and its copy at the model's rate
WORK_BYTES = 256  # bytes charged per audio sample the model reads at once, for its activations:
# measured with the benchmark's tiny wav2vec2 (bench_experts --flood); larger models take more
# (wav2vec2-base's first convolution alone keeps 410), a margin for the operator's memory_budget


@dataclass(frozen=True)
class Limits:
    """One request's input limits (from :class:`expert_server.config.ServerConfig`, whose fields
    of the same names document them): characters, pixels, seconds, frames."""

    max_text_chars: int
    max_image_pixels: int
    max_audio_seconds: float
    max_output_pixels: int
    max_video_frames: int


def _no_charge(nbytes: int) -> None:
    """The charge of a payload made outside a request: nothing is counted."""


@dataclass
class Payload:
    """A parsed request body: ``inputs``, ``parameters`` and the other top-level JSON fields
    (``extra``); ``raw`` is the body when it was a file, not JSON. ``limits`` bound its inputs
    (``None``: unbounded, a payload made outside a request); ``charge(bytes)`` is called before an
    input is decoded with the memory it will take (it raises to refuse)."""

    inputs: Any = None
    parameters: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    raw: bytes | None = None
    limits: Limits | None = None
    charge: Callable[[int], None] = _no_charge


def parse_body(body: bytes, content_type: str, limits: Limits | None = None,
               charge: Callable[[int], None] = _no_charge) -> Payload:
    """The :class:`Payload` of a request body, with ``limits`` and ``charge`` (see :class:`Payload`).

    Raises:
        BadPayload: JSON that does not parse, is nested too deeply, is not an object, or has
            non-object ``parameters``.
    """
    ctype = content_type.split(";")[0].strip().lower()
    looks_json = ctype.endswith("json") or (not ctype and body[:1] == b"{")
    if not looks_json:
        if not body:
            raise BadPayload("inputs", "is missing (the request body is empty)")
        return Payload(inputs=body, raw=body, limits=limits, charge=charge)
    charge(JSON_BYTES * len(body))
    try:
        doc = json.loads(body)
    except RecursionError:
        raise BadPayload("body", "is JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise BadPayload("body", "is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadPayload("body", "must be a JSON object with 'inputs'")
    params = doc.pop("parameters", None) or {}
    if not isinstance(params, dict):
        raise BadPayload("parameters", "must be an object")
    inputs = doc.pop("inputs", None)
    return Payload(inputs=inputs, parameters=params, extra=doc, limits=limits, charge=charge)


def text(p: Payload, name: str = "inputs", value: Any = None) -> str:
    """The non-empty string in ``value`` (default: ``p.inputs``); ``name`` is the field's name.

    Raises:
        BadPayload: not a non-empty string. TooLarge: longer than ``max_text_chars``.
    """
    value = p.inputs if value is None and name == "inputs" else value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if p.limits is not None and isinstance(value, str) and len(value) > p.limits.max_text_chars:
        raise TooLarge(name, f"is a text of {len(value)} characters",
                       f"max_text_chars = {p.limits.max_text_chars}")
    if not isinstance(value, str) or not value or value.isspace():
        raise BadPayload(name, "must be a non-empty string")
    return value


def texts(p: Payload, name: str, values: Any) -> list[str]:
    """The non-empty list of non-empty strings in ``values``, together at most ``max_text_chars``.

    Raises:
        BadPayload: not such a list. TooLarge: longer, all together, than ``max_text_chars``.
    """
    if not isinstance(values, list) or not values or not all(isinstance(s, str) and s for s in values):
        raise BadPayload(name, "must be a non-empty list of strings")
    total = sum(len(s) for s in values)
    if p.limits is not None and total > p.limits.max_text_chars:
        raise TooLarge(name, f"holds texts of {total} characters in all", f"max_text_chars = {p.limits.max_text_chars}")
    return list(values)


def param(p: Payload, name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """``parameters.<name>`` checked against ``kind`` (``default`` when absent or null)."""
    value = p.parameters.get(name)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise BadPayload(f"parameters.{name}", "has the wrong type")
    if not isinstance(value, kind):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise BadPayload(f"parameters.{name}", f"must be of type {names}")
    return value


def file_bytes(p: Payload, name: str = "inputs", value: Any = None) -> bytes:
    """The bytes of a file field: the raw body, or base64 text in JSON."""
    value = p.inputs if value is None and name == "inputs" else value
    if isinstance(value, bytes):
        return value
    if isinstance(value, str) and value:
        try:
            return base64.b64decode(value.split(",", 1)[-1] if value.startswith("data:") else value, validate=False)
        except (binascii.Error, ValueError):
            raise BadPayload(name, "is not base64") from None
    raise BadPayload(name, "must be a file (the raw body, or base64 text in JSON)")


def image(p: Payload, name: str = "inputs", value: Any = None) -> Any:
    """The RGB ``PIL.Image`` in a file field. Its size is read from the header (PIL opens lazily)
    and checked against ``max_image_pixels``, and its decoded bytes charged, before it is decoded.

    Raises:
        BadPayload: not an image PIL reads. TooLarge: over ``max_image_pixels``.
        Busy, TooLarge: from ``charge`` (the memory budget).
    """
    from PIL import Image

    data = file_bytes(p, name, value)
    try:
        img = Image.open(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - PIL raises many kinds for a file that is not an image
        raise BadPayload(name, "is not an image this server can read (PNG, JPEG, WebP, ...)") from None
    limit = p.limits.max_image_pixels if p.limits is not None else Image.MAX_IMAGE_PIXELS or 0
    if img.width * img.height > limit:
        raise TooLarge(name, f"is an image of {img.width}x{img.height} pixels", f"max_image_pixels = {limit}")
    p.charge(img.width * img.height * RGB_BYTES)
    try:
        return img.convert("RGB")
    except Exception:  # noqa: BLE001 - a truncated or corrupt file fails only when decoded
        raise BadPayload(name, "is not an image this server can read (PNG, JPEG, WebP, ...)") from None


def audio(p: Payload, sampling_rate: int, name: str = "inputs", run_seconds: float | None = None,
          value: Any = None) -> Any:
    """The mono float32 samples (numpy, at ``sampling_rate`` Hz) of the audio file in ``name``,
    decoded and resampled with PyAV (FFmpeg's libraries). The duration the container declares is
    checked against ``max_audio_seconds`` and charged before decoding (:data:`SAMPLE_BYTES` a
    sample, and :data:`WORK_BYTES` a sample of what the model reads at once: ``run_seconds``, or
    the whole clip when ``None``); the samples are counted while decoding too (a container can
    lie, or declare nothing).

    Raises:
        BadPayload: not audio FFmpeg reads. TooLarge: longer than ``max_audio_seconds``.
    """
    import av
    import numpy as np

    data = file_bytes(p, name, value)
    seconds = p.limits.max_audio_seconds if p.limits is not None else float("inf")
    too_long = TooLarge(name, f"is audio longer than {seconds:g} seconds", f"max_audio_seconds = {seconds:g}")
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            declared = _duration(container, stream)
            if declared is not None and declared > seconds:
                raise too_long
            clip = min(declared or seconds, seconds)
            p.charge(int(sampling_rate * (clip * SAMPLE_BYTES + min(clip, run_seconds or clip) * WORK_BYTES)))
            chunks = _decode(container, stream, sampling_rate, int(seconds * sampling_rate), too_long)
    except ExpertError:  # over the duration, or refused by the memory budget
        raise
    except Exception:  # noqa: BLE001 - FFmpeg's many errors all mean "not audio we can read"
        raise BadPayload(name, "is not an audio file this server can read (WAV, FLAC, MP3, OGG, ...)") from None
    if not chunks:
        raise BadPayload(name, "is an audio file without samples")
    return np.concatenate(chunks).astype("float32", copy=False)


CHAT_MEDIA = {"audio": ("input_audio", "data"), "video": ("video_url", "url")}
"""Media kind → (part type, field) of an OpenAI-style chat message holding it: audio as OpenAI's
``input_audio`` (base64 ``data``), video as the ``video_url`` extension vLLM-based servers read."""


def chat_parts(p: Payload, kind: str) -> tuple[str, str]:
    """``(question, base64 media)`` of a chat-completions body (``{"messages": [...]}``, as
    ``huggingface_hub``'s ``chat_completion`` posts it): the texts of the last message and its one
    ``kind`` part (:data:`CHAT_MEDIA`), which must be inline (``data:`` URI or base64): a link is
    refused, never fetched.

    Raises:
        BadPayload: no such message, no text, not exactly one ``kind`` part, a link.
        TooLarge: the question is over ``max_text_chars``.
    """
    part_type, key = CHAT_MEDIA[kind]
    messages = p.extra.get("messages")
    content = messages[-1].get("content") if isinstance(messages, list) and messages and isinstance(
        messages[-1], dict) else None
    if not isinstance(content, list):
        raise BadPayload("messages", f"must end with a user message holding a text part and one {part_type} part")
    texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    media = [c.get(part_type) for c in content if isinstance(c, dict) and c.get("type") == part_type]
    if len(media) != 1 or not isinstance(media[0], dict) or not texts:
        raise BadPayload("messages", f"must end with a user message holding a text part and one {part_type} part")
    data = media[0].get(key)
    if not isinstance(data, str) or data.startswith(("http://", "https://", "file:")):
        raise BadPayload(f"messages.{part_type}.{key}", "must be the file inline (a data: URI or base64), not a link")
    return text(p, "messages", " ".join(t for t in texts if isinstance(t, str))), data


VIDEO_FRAMES = 8  # frames a video-language model sees of a video, evenly spread over it
VIDEO_SIDE = 448  # pixels, the longer side a kept frame is scaled to (Qwen2-VL's default frame is about 448x448)


def video_frames(p: Payload, name: str, value: Any) -> list[Any]:
    """Up to :data:`VIDEO_FRAMES` RGB frames (``PIL.Image``, longer side at most
    :data:`VIDEO_SIDE` pixels, scaled by FFmpeg's swscale from the decoded frame) evenly spread
    over the video file in ``value``, decoded with PyAV in one pass. Before decoding, the frame size
    the stream's header declares is checked against ``max_image_pixels`` and the frame count it
    declares against ``max_video_frames``, and the kept frames and one decoded frame are charged;
    frames are counted while decoding too (a container can lie).

    Raises:
        BadPayload: not a video FFmpeg reads, or no frame. TooLarge: over one of the limits.
    """
    import av

    data = file_bytes(p, name, value)
    limit = p.limits.max_video_frames if p.limits is not None else 2**31
    too_long = TooLarge(name, f"is a video of more than {limit} frames", f"max_video_frames = {limit}")
    not_video = BadPayload(name, "is not a video this server can read (MP4, WebM, MKV, ...)")
    try:
        with av.open(io.BytesIO(data)) as container:
            if container.format.name.endswith("_pipe") or container.format.name == "image2":
                raise not_video  # FFmpeg reads a still image (png_pipe, jpeg_pipe...) as a video of one frame
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            pixels = p.limits.max_image_pixels if p.limits is not None else width * height
            if width * height > pixels:
                raise TooLarge(name, f"is a video of {width}x{height} pixels a frame", f"max_image_pixels = {pixels}")
            declared = int(stream.frames or 0) or round((_duration(container, stream) or 0) * float(stream.average_rate or 0))
            if declared > limit:
                raise too_long
            p.charge((VIDEO_FRAMES * VIDEO_SIDE * VIDEO_SIDE + width * height) * RGB_BYTES)
            frames = _spread_frames(container, stream, max(declared, 1), limit, too_long)
    except ExpertError:
        raise
    except Exception:  # noqa: BLE001 - FFmpeg's many errors all mean "not a video we can read"
        raise not_video from None
    if not frames:
        raise BadPayload(name, "is a video without frames")
    return frames


def _spread_frames(container: Any, stream: Any, declared: int, limit: int, too_long: Exception) -> list[Any]:
    """Frames at evenly spread indices of ``declared`` frames (then the next ones, up to
    :data:`VIDEO_FRAMES`, when the container declared too few), scaled to :data:`VIDEO_SIDE`; raises ``too_long`` past ``limit``."""
    wanted = {int(declared * (i + 0.5) / VIDEO_FRAMES) for i in range(VIDEO_FRAMES)}
    kept: list[Any] = []
    for count, frame in enumerate(container.decode(stream), start=1):
        if count > limit:
            raise too_long
        if count - 1 in wanted or (count > declared and len(kept) < VIDEO_FRAMES):
            scale = min(1.0, VIDEO_SIDE / max(frame.width, frame.height, 1))
            kept.append(frame.reformat(width=max(1, round(frame.width * scale)),
                                       height=max(1, round(frame.height * scale)), format="rgb24").to_image())
    return kept


def _duration(container: Any, stream: Any) -> float | None:
    """Seconds the container or the stream declares (``None``: neither says)."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000  # av.time_base: microseconds
    return None


def _decode(container: Any, stream: Any, rate: int, max_samples: int, too_long: Exception) -> list[Any]:
    """Mono float32 chunks at ``rate`` Hz; raises ``too_long`` past ``max_samples``."""
    import itertools

    import av

    resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
    chunks, count = [], 0
    for frame in itertools.chain(container.decode(stream), [None]):  # None: flush the resampler
        for r in resampler.resample(frame):
            chunk = r.to_ndarray().reshape(-1)
            count += len(chunk)
            if count > max_samples:
                raise too_long
            chunks.append(chunk)
    return chunks


def png(img: Any) -> bytes:
    """``img`` (PIL) as PNG bytes."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def wav(samples: Any, sampling_rate: int) -> bytes:
    """Mono float samples in [-1, 1] as 16-bit PCM WAV bytes."""
    import numpy as np

    pcm = (np.clip(np.asarray(samples, dtype="float32").reshape(-1), -1, 1) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sampling_rate))
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def plain(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays turned into JSON types."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return obj
