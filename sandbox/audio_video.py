"""Audio and video for the inference stand-in, derived from their inputs (sandbox only; ffmpeg).

Speech is sine tones whose text rides along in a RIFF ``LIST/INFO/ICMT`` chunk, so the speech
recognition stand-in can give it back; videos are small H.264 MP4s in the prompt's colour.
"""

from __future__ import annotations

import asyncio
import io
import math
import os
import struct
import tempfile
import wave

import numpy as np
from PIL import Image, ImageDraw

from .faults import Fault
from .imaging import load_font, prompt_colour

SAMPLE_RATE = 16000
FRAME_PIXELS = 3840 * 2160
"""Pixels of a video frame the stand-in's video classification decodes at most (a 4K frame)."""


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


async def run_process(args: list[str], stdin: bytes | None = None, timeout: float = 30.0) -> bytes:
    """Run ``args`` (no shell), feeding ``stdin``; return its stdout.

    Raises:
        Fault: 400 when the program exits non-zero (its last stderr lines in the body).
        asyncio.TimeoutError: after ``timeout`` seconds (the process is killed).
    """
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
        raise Fault(400, {"error": f"{args[0]} failed: {err.decode(errors='replace')[-300:]}"})
    return out


async def decode_audio(data: bytes) -> np.ndarray:
    """Mono float samples at 16 kHz (ffmpeg; the input goes through a temporary file)."""
    fd, name = tempfile.mkstemp(prefix="sandbox-audio-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        pcm = await run_process(["ffmpeg", "-v", "error", "-i", name, "-ac", "1", "-ar", str(SAMPLE_RATE), "-f", "s16le", "pipe:1"])
    finally:
        os.unlink(name)
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


async def pcm_to_wav(samples: np.ndarray) -> bytes:
    """Mono float samples (-1..1, 16 kHz) as 16-bit PCM WAVE bytes."""
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
    colour = prompt_colour(prompt)
    raw = bytearray()
    for i in range(frames):
        im = Image.new("RGB", size, colour)
        d = ImageDraw.Draw(im)
        x = int(i * (w - 20) / max(1, frames - 1))
        d.rectangle([x, h // 3, x + 20, 2 * h // 3], fill=(255, 255, 255))
        d.text((4, 4), "[sandbox]", fill=(255, 255, 255), font=load_font(12))
        raw += im.tobytes()
    fd, name = tempfile.mkstemp(prefix="sandbox-video-", suffix=".mp4")
    os.close(fd)
    try:
        await run_process(
            ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", str(fps),
             "-i", "pipe:0", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "+faststart", name],
            stdin=bytes(raw),
        )
        with open(name, "rb") as f:
            return f.read()
    finally:
        os.unlink(name)


async def motion_labels(video: bytes) -> list[dict[str, float | str]]:
    """The stand-in's ``video-classification`` answer, read from the video itself: how much its
    first and last frames differ (mean absolute difference of 64-pixel grey thumbnails, 0-1) as
    ``"moving scene"`` against ``"still scene"``, best first (HF wire format: ``[{label, score}]``).

    Raises:
        ValueError: the video cannot be decoded.
    """
    from pipeline.decoding import Decoder
    from pipeline.video_parts import video_parts

    async with Decoder(max_pixels=FRAME_PIXELS) as decoder:
        parts = await video_parts(video, decoder=decoder, timeout=30.0, frames=2, max_side=64, max_sound_seconds=0)
    if len(parts.frames) < 2:
        raise ValueError("the video has fewer than two frames")
    first, last = (np.asarray(Image.open(io.BytesIO(f.png)).convert("L"), dtype="float32") / 255 for f in parts.frames)
    moving = round(min(0.99, float(np.abs(first - last).mean()) * 20), 4)
    return sorted([{"label": "moving scene", "score": moving}, {"label": "still scene", "score": round(1 - moving, 4)}],
                  key=lambda x: -float(x["score"]))
