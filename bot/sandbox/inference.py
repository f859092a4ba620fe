"""A Hugging Face inference stand-in: ``POST /models/{model_id}`` on 127.0.0.1, every task.

It speaks the wire formats ``huggingface_hub.AsyncInferenceClient`` uses when a model is a URL
(the ``hf-inference`` provider helpers of huggingface_hub 2.4): JSON ``{"inputs", "parameters"}``
or raw image/audio bytes in; JSON lists/dicts or raw image/audio/video bytes out. It is not a
model: every output is *derived from the inputs* (image size and colours, text length, audio
duration) so a chain of tasks can be followed and tests can check results. Text outputs start
with ``[sandbox]``.

Test knobs: ``latency`` (seconds per model id or task), ``faults`` (status codes or
``"timeout"`` consumed one per request), ``gone`` (always 404). Every request is recorded in
``records`` with ``time.monotonic()`` timestamps.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import math
import os
import re
import struct
import tempfile
import time
import wave
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web
from PIL import Image, ImageDraw, ImageFont

log = logging.getLogger(__name__)

# Named colours used to describe images and to colour generated ones.
COLOURS: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "gray": (128, 128, 128),
    "red": (220, 30, 30),
    "orange": (240, 140, 20),
    "yellow": (240, 220, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "purple": (140, 50, 170),
    "pink": (240, 150, 190),
    "brown": (130, 85, 45),
    "beige": (215, 195, 160),
}

_POSITIVE = {"good", "great", "love", "like", "happy", "excellent", "nice", "wonderful", "best", "amazing", "gained", "rallied", "beautiful"}
_NEGATIVE = {"bad", "hate", "terrible", "sad", "awful", "worst", "poor", "angry", "fell", "lost", "ugly", "broken"}

# Guesses from the model id when ``task_of`` does not know the model (checked in order).
_MODEL_HINTS: tuple[tuple[str, str], ...] = (
    ("controlnet", "canny-text-to-image"),
    ("depth", "depth-estimation"),
    ("dpt", "depth-estimation"),
    ("detr", "object-detection"),
    ("yolo", "object-detection"),
    ("segformer", "image-segmentation"),
    ("maskformer", "image-segmentation"),
    ("caption", "image-to-text"),
    ("blip", "image-to-text"),
    ("vqa", "visual-question-answering"),
    ("layoutlm", "document-question-answering"),
    ("donut", "document-question-answering"),
    ("whisper", "automatic-speech-recognition"),
    ("wav2vec", "automatic-speech-recognition"),
    ("speecht5_tts", "text-to-speech"),
    ("tts", "text-to-speech"),
    ("espnet", "text-to-speech"),
    ("enhance", "audio-to-audio"),
    ("sepformer", "audio-to-audio"),
    ("video", "text-to-video"),
    ("stable-diffusion", "text-to-image"),
    ("diffusion", "text-to-image"),
    ("opus-mt", "translation"),
    ("translat", "translation"),
    ("t5", "translation"),
    ("bart-large-cnn", "summarization"),
    ("summar", "summarization"),
    ("pegasus", "summarization"),
    ("squad", "question-answering"),
    ("ner", "token-classification"),
    ("bert-base", "fill-mask"),
    ("roberta-base", "fill-mask"),
    ("sentiment", "text-classification"),
    ("sst", "text-classification"),
    ("finbert", "text-classification"),
    ("sentence-transformers", "sentence-similarity"),
    ("minilm", "sentence-similarity"),
    ("vit", "image-classification"),
    ("resnet", "image-classification"),
    ("ast-", "audio-classification"),
    ("emotion", "audio-classification"),
)


@dataclass
class Record:
    """One request the stand-in served.

    Attributes:
        model: model id from the URL.
        task: the task it was served as.
        start, end: ``time.monotonic()`` seconds at arrival and at the response (or abort).
        status: HTTP status returned; 499 when the client went away first.
        answer: the body sent back (``b""`` for errors and streamed answers), so tests can compare
            what the product made of an answer with the answer itself.
    """

    model: str
    task: str
    start: float
    end: float
    status: int
    answer: bytes = b""


class _Fault(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body


# ----------------------------------------------------------------------------------------------
# Helpers derived from inputs


def _open(data: bytes) -> Image.Image:
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return im.convert("RGB")
    except Exception as exc:  # noqa: BLE001
        raise _Fault(400, {"error": f"could not decode image: {exc}"}) from exc


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def colour_name(rgb: Any) -> str:
    """Nearest named colour of an RGB triple."""
    r, g, b = (float(v) for v in rgb)
    return min(COLOURS, key=lambda n: sum((c - v) ** 2 for c, v in zip(COLOURS[n], (r, g, b))))


def _colour_shares(im: Image.Image) -> list[tuple[str, float, np.ndarray]]:
    """Pixels quantised to the named colours: ``(name, share, mask)``, largest share first."""
    arr = np.asarray(im.resize((max(1, im.width), max(1, im.height))), dtype=np.float32)
    names = list(COLOURS)
    palette = np.array([COLOURS[n] for n in names], dtype=np.float32)
    d = ((arr[:, :, None, :] - palette[None, None, :, :]) ** 2).sum(axis=3)
    idx = d.argmin(axis=2)
    out = []
    total = idx.size
    for i, n in enumerate(names):
        mask = idx == i
        share = float(mask.sum()) / total
        if share > 0:
            out.append((n, share, mask))
    out.sort(key=lambda t: -t[1])
    return out


def describe_image(im: Image.Image) -> str:
    """``"a 451x300 image, mostly brown, brighter at the top"``."""
    arr = np.asarray(im, dtype=np.float32)
    mean = arr.reshape(-1, 3).mean(axis=0)
    grey = arr.mean(axis=2)
    h = grey.shape[0]
    top, bottom = grey[: h // 2].mean(), grey[h // 2 :].mean()
    where = "brighter at the top" if top > bottom + 8 else "brighter at the bottom" if bottom > top + 8 else "evenly lit"
    return f"a {im.width}x{im.height} image, mostly {colour_name(mean)}, {where}"


def _prompt_colour(text: str, default: tuple[int, int, int] = (70, 110, 160)) -> tuple[int, int, int]:
    words = re.findall(r"[a-z]+", text.lower())
    for w in words:
        if w == "grey":
            w = "gray"
        if w in COLOURS:
            return COLOURS[w]
    return default


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover
        return ImageFont.load_default()


def draw_prompt(prompt: str, width: int = 512, height: int = 512) -> bytes:
    """A PNG of the prompt's colour (first colour word, else steel blue) with the prompt written on it."""
    colour = _prompt_colour(prompt)
    im = Image.new("RGB", (width, height), colour)
    d = ImageDraw.Draw(im)
    ink = (0, 0, 0) if sum(colour) > 380 else (255, 255, 255)
    font = _font(max(12, width // 24))
    words, lines, line = prompt.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > 28:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    if line:
        lines.append(line)
    y = height // 8
    for ln in ["[sandbox]"] + lines[:10]:
        d.text((width // 16, y), ln, fill=ink, font=font)
        y += int(font.size * 1.3) if hasattr(font, "size") else 16
    return _png(im)


def _edges(im: Image.Image) -> Image.Image:
    import cv2

    e = cv2.Canny(np.asarray(im.convert("L")), 100, 200)
    return Image.fromarray(e, mode="L").convert("RGB")


def _depth(im: Image.Image) -> Image.Image:
    """Depth-like map: a top-to-bottom gradient mixed with blurred brightness (near = bright)."""
    grey = np.asarray(im.convert("L"), dtype=np.float32)
    h, w = grey.shape
    grad = np.linspace(0, 255, h, dtype=np.float32)[:, None].repeat(w, axis=1)
    small = Image.fromarray(grey.astype(np.uint8)).resize((max(1, w // 8), max(1, h // 8))).resize((w, h))
    depth = 0.6 * grad + 0.4 * np.asarray(small, dtype=np.float32)
    return Image.fromarray(depth.clip(0, 255).astype(np.uint8), mode="L")


def _boxes(im: Image.Image) -> list[dict[str, Any]]:
    """Boxes around the largest bright and dark regions (thresholds mean ± 0.8 std)."""
    import cv2

    grey = np.asarray(im.convert("L"), dtype=np.float32)
    arr = np.asarray(im)
    mu, sd = grey.mean(), grey.std() or 1.0
    found = []
    for which, mask in (("bright", grey > mu + 0.8 * sd), ("dark", grey < mu - 0.8 * sd)):
        m = mask.astype(np.uint8)
        m = cv2.morphologyEx(m, cv2.MORPH_OPEN, np.ones((5, 5), np.uint8))
        n, _, stats, _ = cv2.connectedComponentsWithStats(m)
        comps = sorted(range(1, n), key=lambda i: -stats[i, cv2.CC_STAT_AREA])[:2]
        for i in comps:
            x, y, w, h, area = (int(v) for v in stats[i])
            if area < 0.002 * grey.size:
                continue
            region = arr[y : y + h, x : x + w].reshape(-1, 3).mean(axis=0)
            score = round(min(0.99, 0.5 + area / grey.size), 3)
            found.append(
                {"score": score, "label": f"{colour_name(region)} {which} object", "box": {"xmin": x, "ymin": y, "xmax": x + w - 1, "ymax": y + h - 1}}
            )
    found.sort(key=lambda o: -o["score"])
    return found[:4]


def _segments(im: Image.Image) -> list[dict[str, Any]]:
    out = []
    for name, share, mask in _colour_shares(im)[:3]:
        m = Image.fromarray((mask * 255).astype(np.uint8), mode="L")
        out.append({"score": round(share, 4), "label": name, "mask": base64.b64encode(_png(m)).decode()})
    return out


def _transform(im: Image.Image, prompt: str | None) -> Image.Image:
    p = (prompt or "").lower()
    if any(k in p for k in ("black and white", "grayscale", "greyscale", "monochrome")):
        return im.convert("L").convert("RGB")
    if prompt and _prompt_colour(prompt, default=(-1, -1, -1)) != (-1, -1, -1):
        tint = Image.new("RGB", im.size, _prompt_colour(prompt))
        return Image.blend(im, tint, 0.4)
    r, g, b = im.split()
    return Image.merge("RGB", (b, r, g))  # colour-shifted: channels rotated


def _condition(im: Image.Image, cond: str) -> Image.Image:
    """ControlNet condition image: depth map for ``depth``, colour map for ``seg``, else edges."""
    if cond == "depth":
        return _depth(im).convert("RGB")
    if cond == "seg":
        arr = np.zeros((im.height, im.width, 3), dtype=np.uint8)
        for name, _, mask in _colour_shares(im):
            arr[mask] = COLOURS[name]
        return Image.fromarray(arr)
    return _edges(im)


def _controlnet_draw(cond: Image.Image, prompt: str) -> Image.Image:
    colour = _prompt_colour(prompt)
    base = Image.new("RGB", cond.size, colour)
    lines = np.asarray(cond.convert("L")) > 127
    arr = np.asarray(base).copy()
    arr[lines] = 255 - np.asarray(colour, dtype=np.uint8)
    im = Image.fromarray(arr)
    ImageDraw.Draw(im).text((8, 8), f"[sandbox] {prompt[:40]}", fill=(255, 255, 255), font=_font(14))
    return im


# -- audio ---------------------------------------------------------------------------------------

SAMPLE_RATE = 16000


def make_wav(text: str) -> bytes:
    """Sine tones, 60 ms per character (0.5..10 s), pitch from the characters; the text is kept in
    a RIFF ``LIST/INFO/ICMT`` chunk so the ASR stand-in can give it back."""
    n_chars = max(1, len(text))
    seconds = min(10.0, max(0.5, 0.06 * n_chars))
    per = int(SAMPLE_RATE * seconds / n_chars) or 1
    chunks = []
    t = np.arange(per) / SAMPLE_RATE
    for ch in text or " ":
        f = 200 + (ord(ch) % 64) * 10
        chunks.append(0.3 * np.sin(2 * math.pi * f * t))
    pcm = (np.concatenate(chunks) * 32767).astype("<i2").tobytes()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm)
    body = buf.getvalue()
    comment = text.encode("utf-8")[:2000] + b"\x00"
    if len(comment) % 2:
        comment += b"\x00"
    info = b"INFO" + b"ICMT" + struct.pack("<I", len(comment)) + comment
    lst = b"LIST" + struct.pack("<I", len(info)) + info
    riff = body[:4] + struct.pack("<I", len(body) - 8 + len(lst)) + body[8:] + lst
    return riff


def wav_comment(data: bytes) -> str | None:
    """The ICMT text of a RIFF WAVE file, if any."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        body = data[pos + 8 : pos + 8 + size]
        if cid == b"LIST" and body[:4] == b"INFO":
            p = 4
            while p + 8 <= len(body):
                sid, ssize = body[p : p + 4], struct.unpack("<I", body[p + 4 : p + 8])[0]
                if sid == b"ICMT":
                    return body[p + 8 : p + 8 + ssize].rstrip(b"\x00").decode("utf-8", errors="replace")
                p += 8 + ssize + (ssize % 2)
        pos += 8 + size + (size % 2)
    return None


async def _run(args: list[str], stdin: bytes | None = None, timeout: float = 30.0) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        *args, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise _Fault(400, {"error": f"{args[0]} failed: {err.decode(errors='replace')[-300:]}"})
    return out


async def decode_audio(data: bytes) -> np.ndarray:
    """Mono float samples at 16 kHz (ffmpeg; the input goes through a temporary file)."""
    fd, name = tempfile.mkstemp(prefix="sandbox-audio-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        pcm = await _run(["ffmpeg", "-v", "error", "-i", name, "-ac", "1", "-ar", str(SAMPLE_RATE), "-f", "s16le", "pipe:1"])
    finally:
        os.unlink(name)
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


async def pcm_to_wav(samples: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes((samples.clip(-1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


async def make_video(prompt: str, frames: int = 16, size: tuple[int, int] = (160, 128), fps: int = 8) -> bytes:
    """A small H.264 MP4 (ffmpeg): prompt-coloured frames with a bar moving across."""
    w, h = size
    colour = _prompt_colour(prompt)
    raw = bytearray()
    for i in range(frames):
        im = Image.new("RGB", size, colour)
        d = ImageDraw.Draw(im)
        x = int(i * (w - 20) / max(1, frames - 1))
        d.rectangle([x, h // 3, x + 20, 2 * h // 3], fill=(255, 255, 255))
        d.text((4, 4), "[sandbox]", fill=(255, 255, 255), font=_font(12))
        raw += im.tobytes()
    fd, name = tempfile.mkstemp(prefix="sandbox-video-", suffix=".mp4")
    os.close(fd)
    try:
        await _run(
            ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", str(fps),
             "-i", "pipe:0", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "+faststart", name],
            stdin=bytes(raw),
        )
        with open(name, "rb") as f:
            return f.read()
    finally:
        os.unlink(name)


# -- text ----------------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def _sentiment(text: str) -> list[dict[str, Any]]:
    ws = _words(text)
    pos = sum(w in _POSITIVE for w in ws)
    neg = sum(w in _NEGATIVE for w in ws)
    p = round((pos + 1) / (pos + neg + 2), 4)
    items = [{"label": "POSITIVE", "score": p}, {"label": "NEGATIVE", "score": round(1 - p, 4)}]
    return sorted(items, key=lambda x: -x["score"])


def _fills(text: str) -> list[dict[str, Any]]:
    """Fill-mask answers: the words of the text itself tried in the ``[MASK]`` / ``<mask>`` slot,
    longest first (deterministic, derived from the input)."""
    slot = "[MASK]" if "[MASK]" in text else "<mask>"
    if slot not in text:
        raise _Fault(400, {"error": "No mask_token ([MASK]) found on the input"})
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z]+", text.replace(slot, " ")) if w.upper() != "MASK"},
                   key=lambda w: (-len(w), w))[:5] or ["thing"]
    scores = [round(0.6 / (i + 1), 4) for i in range(len(words))]
    return [{"sequence": text.replace(slot, w, 1), "score": s, "token": 1000 + i, "token_str": w}
            for i, (w, s) in enumerate(zip(words, scores))]


def _entities(text: str) -> list[dict[str, Any]]:
    out = []
    for m in re.finditer(r"\b[A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*", text):
        start, word = m.start(), m.group(0)
        if start == 0 or text[:start].rstrip().endswith((".", "!", "?")):
            # A capital at the start of a sentence says nothing: drop that first word.
            first, _, rest = word.partition(" ")
            if not rest.strip():
                continue
            start += len(word) - len(rest.lstrip())
            word = rest.strip()
        out.append({"entity_group": "MISC", "score": 0.9, "word": word, "start": start, "end": start + len(word)})
    return out


def _similarity(a: str, b: str) -> float:
    x, y = set(_words(a)), set(_words(b))
    return round(len(x & y) / len(x | y), 4) if x | y else 0.0


def _best_span(question: str, context: str) -> tuple[str, int, int]:
    best, best_score, best_start = context.strip(), -1.0, 0
    q = set(_words(question))
    for m in re.finditer(r"[^.!?]+[.!?]?", context):
        s = m.group(0).strip()
        if not s:
            continue
        score = len(q & set(_words(s)))
        if score > best_score:
            best, best_score, best_start = s, score, m.start() + (len(m.group(0)) - len(m.group(0).lstrip()))
    return best, best_start, best_start + len(best)


# ----------------------------------------------------------------------------------------------
# The server


class InferenceStandIn:
    """Hugging Face inference stand-in on ``127.0.0.1`` (port chosen by the OS).

    Args:
        task_of: model id -> task (pipeline tag or ControlNet task). Unknown models are guessed
            from the payload and the model id.
        latency: model id or task -> seconds to wait before answering.
        faults: model id -> list of status codes or ``"timeout"``, consumed one per request.
        gone: model ids that always answer 404.
        estimated_time: seconds reported in 503 bodies.
        hang_seconds: how long a ``"timeout"`` fault stalls.

    Use ``url = await standin.start()`` / ``await standin.close()``, or ``async with``.
    """

    def __init__(
        self,
        task_of: dict[str, str] | None = None,
        *,
        latency: dict[str, float] | None = None,
        faults: dict[str, list[int | str]] | None = None,
        gone: set[str] | None = None,
        estimated_time: float = 0.1,
        hang_seconds: float = 30.0,
    ) -> None:
        self.task_of: dict[str, str] = dict(task_of or {})
        self.latency: dict[str, float] = dict(latency or {})
        self.faults: dict[str, list[int | str]] = {k: list(v) for k, v in (faults or {}).items()}
        self.gone: set[str] = set(gone or ())
        self.estimated_time = estimated_time
        self.hang_seconds = hang_seconds
        self.records: list[Record] = []
        self.url: str | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Start serving; returns the base URL ``http://127.0.0.1:PORT``."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/models/{model_id:.+}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "InferenceStandIn":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- dispatch -------------------------------------------------------------------------------

    def _guess(self, model: str, ctype: str, body: bytes, payload: Any, accept: str) -> str:
        if model in self.task_of:
            return self.task_of[model]
        low = model.lower()
        if isinstance(payload, dict):
            inputs = payload.get("inputs")
            if "messages" in payload:
                return "conversational"
            if "table" in payload:
                return "tabular-classification"
            if "question" in payload and "image" in payload:
                return "visual-question-answering"
            if isinstance(inputs, dict):
                if "source_sentence" in inputs:
                    return "sentence-similarity"
                if "image" in inputs:
                    return "document-question-answering"
                if "context" in inputs:
                    return "question-answering"
            if "image/" in accept:
                if isinstance(inputs, str) and len(inputs) > 100 and re.fullmatch(r"[A-Za-z0-9+/=\s]+", inputs[:200]):
                    return "image-to-image"
                return "text-to-image"
        for hint, task in _MODEL_HINTS:
            if hint in low:
                return task
        if payload is None and body:
            from pipeline.media import sniff

            s = sniff(body)
            if s and s.kind == "image":
                return "image-to-image" if "image/" in accept else "image-to-text"
            if s and s.kind in ("audio", "video"):
                return "automatic-speech-recognition"
        return "text-generation"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        model = request.match_info["model_id"]
        chat = False
        for suffix in ("/v1/chat/completions", "/chat/completions"):
            if model.endswith(suffix):
                model, chat = model[: -len(suffix)], True
        body = await request.read()
        ctype = request.headers.get("Content-Type", "")
        payload: Any = None
        if "json" in ctype or (body[:1] in (b"{", b"[") and not ctype.startswith(("image/", "audio/", "video/"))):
            try:
                payload = json.loads(body or b"null")
            except ValueError:
                payload = None
        task = "conversational" if chat else self._guess(model, ctype, body, payload, request.headers.get("Accept", ""))
        status = 499
        answer = b""
        try:
            if model in self.gone:
                raise _Fault(404, {"error": f"Model {model} does not exist"})
            queue = self.faults.get(model)
            if queue:
                fault = queue.pop(0)
                if fault == "timeout":
                    await asyncio.sleep(self.hang_seconds)
                    raise _Fault(504, {"error": "stand-in stalled"})
                code = int(fault)
                err: dict[str, Any] = {"error": f"[sandbox] fault {code} for {model}"}
                if code == 503:
                    err = {"error": f"Model {model} is currently loading", "estimated_time": self.estimated_time}
                elif code == 429:
                    err = {"error": "Rate limit reached. Please slow down."}
                raise _Fault(code, err)
            delay = self.latency.get(model, self.latency.get(task, 0.0))
            if delay:
                await asyncio.sleep(delay)
            response = await self._serve(task, model, body, payload, request)
            status = response.status
            answer = response.body if isinstance(response.body, bytes) else b""
            return response
        except _Fault as f:
            status = f.status
            return web.json_response(f.body, status=f.status)
        finally:
            self.records.append(Record(model, task, start, time.monotonic(), status, answer))

    async def _serve(self, task: str, model: str, body: bytes, payload: Any, request: web.Request) -> web.Response:
        inputs = payload.get("inputs") if isinstance(payload, dict) else None
        params = (payload.get("parameters") or {}) if isinstance(payload, dict) else {}

        def text_in() -> str:
            if not isinstance(inputs, str):
                raise _Fault(400, {"error": f"{task} expects text inputs"})
            return inputs

        def image_in() -> bytes:
            if payload is None:
                return body
            src = payload.get("image") if isinstance(payload, dict) and "image" in payload else inputs
            if isinstance(src, dict):
                src = src.get("image")
            if not isinstance(src, str):
                raise _Fault(400, {"error": f"{task} expects an image"})
            try:
                return base64.b64decode(src)
            except ValueError as exc:
                raise _Fault(400, {"error": "image is not base64"}) from exc

        J = web.json_response
        if task == "conversational":
            msgs = payload.get("messages") if isinstance(payload, dict) else None
            last = next((m.get("content") for m in reversed(msgs or []) if m.get("role") == "user"), "")
            if isinstance(last, list):
                last = " ".join(p.get("text", "") for p in last if isinstance(p, dict))
            return J({
                "id": "sandbox-1", "object": "chat.completion", "created": int(time.time()), "model": model,
                "system_fingerprint": "sandbox",
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": f"[sandbox] reply to: {last}"}}],
                "usage": {"prompt_tokens": len(str(last).split()), "completion_tokens": 5, "total_tokens": len(str(last).split()) + 5},
            })
        if task == "text-classification":
            return J([_sentiment(text_in())])
        if task == "token-classification":
            return J(_entities(text_in()))
        if task == "fill-mask":
            return J(_fills(text_in()))
        if task == "summarization":
            t = text_in()
            first = re.split(r"(?<=[.!?])\s", t.strip())[0]
            return J([{"summary_text": "[sandbox] summary: " + " ".join(first.split()[:25])}])
        if task == "translation":
            return J([{"translation_text": f"[sandbox] translation of: {text_in()}"}])
        if task in ("text-generation", "text2text-generation"):
            t = text_in()
            return J([{"generated_text": f"[sandbox] generated text for: {t}"}])
        if task == "question-answering":
            if not isinstance(inputs, dict):
                raise _Fault(400, {"error": "question-answering expects question and context"})
            span, s, e = _best_span(str(inputs.get("question", "")), str(inputs.get("context", "")))
            return J({"answer": f"[sandbox] {span}", "score": 0.5, "start": s, "end": e})
        if task == "sentence-similarity":
            if not isinstance(inputs, dict):
                raise _Fault(400, {"error": "sentence-similarity expects source_sentence and sentences"})
            src = str(inputs.get("source_sentence", ""))
            return J([_similarity(src, str(s)) for s in inputs.get("sentences", [])])
        if task == "tabular-classification":
            table = payload.get("table") if isinstance(payload, dict) else None
            if not isinstance(table, dict) or not table:
                raise _Fault(400, {"error": "tabular-classification expects a table"})
            cols = list(table.values())
            n = len(cols[0])
            sums = []
            for i in range(n):
                total = 0.0
                for col in cols:
                    try:
                        total += float(col[i])
                    except (ValueError, TypeError, IndexError):
                        pass
                sums.append(total)
            mean = sum(sums) / n if n else 0
            return J(["above-average" if s > mean else "below-average" for s in sums])

        if task in ("object-detection", "image-classification", "image-to-text", "image-segmentation",
                    "depth-estimation", "image-to-image", "visual-question-answering",
                    "document-question-answering") or task.endswith(("-control", "-text-to-image")) and task != "text-to-image":
            im = await asyncio.to_thread(_open, image_in())
            if task == "object-detection":
                return J(await asyncio.to_thread(_boxes, im))
            if task == "image-classification":
                shares = await asyncio.to_thread(_colour_shares, im)
                return J([{"label": n, "score": round(s, 4)} for n, s, _ in shares[:5]])
            if task == "image-to-text":
                return J([{"generated_text": "[sandbox] " + await asyncio.to_thread(describe_image, im)}])
            if task == "image-segmentation":
                return J(await asyncio.to_thread(_segments, im))
            if task == "depth-estimation":
                d = await asyncio.to_thread(lambda: base64.b64encode(_png(_depth(im))).decode())
                return J({"depth": d})
            if task in ("visual-question-answering", "document-question-answering"):
                q = payload.get("question") if isinstance(payload, dict) and "question" in payload else (inputs or {}).get("question", "")
                desc = await asyncio.to_thread(describe_image, im)
                ans = f"[sandbox] answer to {q!r}: {desc}"
                if task == "document-question-answering":
                    return J([{"answer": ans, "score": 0.5, "start": 0, "end": 0}])
                return J([{"answer": ans, "score": 0.5}])
            prompt = params.get("prompt") if isinstance(params, dict) else None
            if task == "image-to-image":
                out = await asyncio.to_thread(_transform, im, prompt)
            elif task.endswith("-control"):
                cond = task.split("-")[0]
                out = await asyncio.to_thread(_condition, im, cond)
            else:
                out = await asyncio.to_thread(_controlnet_draw, im, str(prompt or ""))
            return web.Response(body=await asyncio.to_thread(_png, out), content_type="image/png")

        if task == "text-to-image":
            t = text_in()
            w = int(params.get("width") or 512)
            h = int(params.get("height") or 512)
            return web.Response(body=await asyncio.to_thread(draw_prompt, t, w, h), content_type="image/png")
        if task == "text-to-speech":
            return web.Response(body=await asyncio.to_thread(make_wav, text_in()), content_type="audio/wav")
        if task == "text-to-video":
            return web.Response(body=await make_video(text_in()), content_type="video/mp4")
        if task in ("automatic-speech-recognition", "audio-classification", "audio-to-audio"):
            audio = body if payload is None else base64.b64decode(str(inputs or ""))
            if task == "automatic-speech-recognition":
                said = wav_comment(audio)
                if said:
                    return J({"text": f"[sandbox] {said}"})
                samples = await decode_audio(audio)
                return J({"text": f"[sandbox transcript of {len(samples) / SAMPLE_RATE:.1f} s of audio]"})
            samples = await decode_audio(audio)
            if task == "audio-classification":
                rms = float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0
                loud = min(0.99, rms * 5)
                return J(sorted(
                    [{"label": "loud sound", "score": round(loud, 4)}, {"label": "quiet sound", "score": round(1 - loud, 4)}],
                    key=lambda x: -x["score"],
                ))
            peak = float(np.abs(samples).max()) if samples.size else 0.0
            norm = samples * (0.9 / peak) if peak > 0 else samples
            wav = await pcm_to_wav(norm)
            return J([{"label": "[sandbox] normalised", "content-type": "audio/wav", "blob": base64.b64encode(wav).decode()}])
        raise _Fault(400, {"error": f"[sandbox] task {task} is not served"})
