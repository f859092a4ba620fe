"""Fitting generated media under Discord's upload limit, on real photos, speech and video."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

from PIL import Image

from adapters.discord.media import fit_media

MEDIA = Path(__file__).parent / "fixtures" / "media"


def _probe(data: bytes, tmp_path: Path, suffix: str) -> dict:
    p = tmp_path / f"probe{suffix}"
    p.write_bytes(data)
    out = subprocess.run(["ffprobe", "-v", "error", "-show_format", "-show_streams", "-of", "json", str(p)],
                         capture_output=True, check=True).stdout
    return json.loads(out)


async def test_small_file_is_untouched() -> None:
    data = (MEDIA / "chelsea.png").read_bytes()
    fitted = await fit_media(data, filename="chelsea.png", mime="image/png", limit=len(data))
    assert fitted.data == data and fitted.note is None and fitted.filename == "chelsea.png"


async def test_large_photo_is_reencoded_then_downscaled() -> None:
    data = (MEDIA / "astronaut.png").read_bytes()  # 512x512 PNG, ~790 KB
    fitted = await fit_media(data, filename="astronaut.png", mime="image/png", limit=60_000)
    assert fitted.data is not None and len(fitted.data) <= 60_000
    with Image.open(io.BytesIO(fitted.data)) as im:
        assert im.format == "JPEG"
        w, h = im.size
        assert abs(w / h - 1.0) < 0.02  # aspect kept
        # still the astronaut photo: mostly the same colours as the original, downscaled
        with Image.open(MEDIA / "astronaut.png") as orig:
            a = orig.convert("RGB").resize((32, 32)).tobytes()
            b = im.convert("RGB").resize((32, 32)).tobytes()
        assert sum(abs(x - y) for x, y in zip(a, b)) / len(a) < 12
    assert fitted.filename == "astronaut.jpg" and fitted.mime == "image/jpeg"
    assert "astronaut.png was 773 KB, over the 59 KB upload limit here" in fitted.note
    if (w, h) != (512, 512):
        assert f"downscaled from 512×512 to {w}×{h} pixels" in fitted.note


async def test_speech_is_transcoded_to_opus(tmp_path: Path) -> None:
    data = (MEDIA / "speech_weather.wav").read_bytes()  # ~5 s, 217 KB
    fitted = await fit_media(data, filename="speech.wav", mime="audio/wav", limit=40_000)
    assert fitted.data is not None and len(fitted.data) <= 40_000
    info = _probe(fitted.data, tmp_path, ".ogg")
    assert info["streams"][0]["codec_name"] == "opus"
    assert abs(float(info["format"]["duration"]) - 5.05) < 0.3  # nothing cut
    assert fitted.filename == "speech.ogg" and "re-encoded it as Opus at" in fitted.note


async def test_speech_is_trimmed_as_last_resort_and_says_so(tmp_path: Path) -> None:
    data = (MEDIA / "speech_weather.wav").read_bytes()
    fitted = await fit_media(data, filename="speech.wav", mime="audio/wav", limit=9_000)
    assert fitted.data is not None and len(fitted.data) <= 9_000
    kept = float(_probe(fitted.data, tmp_path, ".ogg")["format"]["duration"])
    assert 1.0 <= kept < 4.0
    assert "only the first" in fitted.note and "too long" in fitted.note


async def test_video_is_reencoded(tmp_path: Path) -> None:
    data = (MEDIA / "rocket_zoom.mp4").read_bytes()
    fitted = await fit_media(data, filename="rocket_zoom.mp4", mime="video/mp4", limit=len(data) - 1)
    assert fitted.note
    if fitted.data is not None:
        assert len(fitted.data) < len(data)
        info = _probe(fitted.data, tmp_path, ".mp4")
        assert any(s["codec_type"] == "video" for s in info["streams"])
    else:
        assert "is not attached" in fitted.note


async def test_unshrinkable_file_is_reported_not_dropped() -> None:
    fitted = await fit_media(b"%PDF-1.4" + b"x" * 5000, filename="report.pdf", mime="application/pdf", limit=1000)
    assert fitted.data is None
    assert fitted.note == "📎 report.pdf (5 KB) is over the 1 KB upload limit here, so it is not attached."
