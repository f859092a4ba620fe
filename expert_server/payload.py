"""Request bodies as ``huggingface_hub``'s client sends them to a URL model (its ``hf-inference``
helper, ``huggingface_hub/inference/_providers/hf_inference.py``), and the media inside them.

* text tasks: JSON ``{"inputs": ..., "parameters": {...}}``;
* image and audio tasks without parameters: the raw file, ``Content-Type`` its MIME type;
* with parameters (or extra fields, as visual question answering's ``question`` and ``image``):
  JSON ``{"inputs": "<base64>", "parameters": {...}, ...}``.

Everything wrong with a body raises :class:`~expert_server.errors.BadPayload` naming the field.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import wave
from dataclasses import dataclass, field
from typing import Any

from .errors import BadPayload

MAX_IMAGE_PIXELS = 64_000_000  # decompression bombs are refused, not decoded


@dataclass
class Payload:
    """A parsed request body: ``inputs``, ``parameters`` and the other top-level JSON fields
    (``extra``); ``raw`` is the body when it was a file, not JSON."""

    inputs: Any = None
    parameters: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    raw: bytes | None = None


def parse_body(body: bytes, content_type: str) -> Payload:
    """The :class:`Payload` of a request body.

    Raises:
        BadPayload: JSON that does not parse, is not an object, or has non-object ``parameters``.
    """
    ctype = content_type.split(";")[0].strip().lower()
    looks_json = ctype.endswith("json") or (not ctype and body[:1] == b"{")
    if not looks_json:
        if not body:
            raise BadPayload("inputs", "is missing (the request body is empty)")
        return Payload(inputs=body, raw=body)
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadPayload("body", "is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadPayload("body", "must be a JSON object with 'inputs'")
    params = doc.pop("parameters", None) or {}
    if not isinstance(params, dict):
        raise BadPayload("parameters", "must be an object")
    inputs = doc.pop("inputs", None)
    return Payload(inputs=inputs, parameters=params, extra=doc)


def text(p: Payload, name: str = "inputs", value: Any = None) -> str:
    """The non-empty string in ``value`` (default: ``p.inputs``); ``name`` is the field's name."""
    value = p.inputs if value is None and name == "inputs" else value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or not value.strip():
        raise BadPayload(name, "must be a non-empty string")
    return value


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
    """The RGB ``PIL.Image`` in a file field."""
    from PIL import Image

    data = file_bytes(p, name, value)
    try:
        img = Image.open(io.BytesIO(data))
        if img.width * img.height > MAX_IMAGE_PIXELS:
            raise BadPayload(name, f"is an image of {img.width}x{img.height} pixels, over the limit of {MAX_IMAGE_PIXELS}")
        return img.convert("RGB")
    except BadPayload:
        raise
    except Exception:  # noqa: BLE001 - PIL raises many kinds for a file that is not an image
        raise BadPayload(name, "is not an image this server can read (PNG, JPEG, WebP, ...)") from None


def audio(p: Payload, sampling_rate: int, name: str = "inputs") -> Any:
    """The mono float32 samples (numpy, at ``sampling_rate`` Hz) of the audio file in ``name``,
    decoded and resampled with PyAV (FFmpeg's libraries)."""
    import av
    import numpy as np

    data = file_bytes(p, name)
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sampling_rate)
            chunks = [r.to_ndarray().reshape(-1) for frame in container.decode(stream) for r in resampler.resample(frame)]
            chunks += [r.to_ndarray().reshape(-1) for r in resampler.resample(None)]
    except Exception:  # noqa: BLE001 - FFmpeg's many errors all mean "not audio we can read"
        raise BadPayload(name, "is not an audio file this server can read (WAV, FLAC, MP3, OGG, ...)") from None
    if not chunks:
        raise BadPayload(name, "is an audio file without samples")
    return np.concatenate(chunks).astype("float32")


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
