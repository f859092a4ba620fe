"""A video's readable parts, from real clips: its sound track (FLAC, 16 kHz mono) and frames
spread over its length."""

from __future__ import annotations

import io
from pathlib import Path

import av
import pytest
from PIL import Image

from pipeline.video_parts import SOUND_RATE, extract_parts, video_parts

MEDIA = Path(__file__).parent / "fixtures" / "media"


def test_a_clip_with_speech_gives_its_sound_and_three_frames():
    parts = extract_parts((MEDIA / "rocket_speech.mp4").read_bytes())
    with av.open(io.BytesIO(parts.sound)) as c:
        stream = c.streams.audio[0]
        assert c.format.name == "flac" and stream.rate == SOUND_RATE and stream.layout.name == "mono"
        assert abs(c.duration / av.time_base - 5.05) < 0.1  # the speech is 5.05 s long
    assert not parts.sound_cut and abs(parts.sound_seconds - 5.05) < 0.1
    assert [f.at for f in parts.frames] == sorted(f.at for f in parts.frames) and len(parts.frames) == 3
    for frame, slice_middle in zip(parts.frames, (0.96, 2.88, 4.8)):  # 5.76 s of video in three slices
        assert abs(frame.at - slice_middle) <= 0.05  # 25 frames per second
        assert Image.open(io.BytesIO(frame.png)).size == (frame.width, frame.height) == (320, 400)


def test_a_silent_clip_has_frames_and_no_sound():
    parts = extract_parts((MEDIA / "rocket_zoom.mp4").read_bytes(), frames=4, max_side=200)
    assert parts.sound is None and parts.sound_seconds == 0
    assert len(parts.frames) == 4 and all(max(f.width, f.height) == 200 for f in parts.frames)
    first, last = (Image.open(io.BytesIO(f.png)).convert("L") for f in (parts.frames[0], parts.frames[-1]))
    assert first.tobytes() != last.tobytes()  # the clip zooms: the frames differ


def test_a_long_sound_is_cut_at_the_limit():
    parts = extract_parts((MEDIA / "rocket_speech.mp4").read_bytes(), max_sound_seconds=2)
    assert parts.sound_cut and parts.sound_seconds == 2.0


async def test_garbage_is_one_sentence():
    with pytest.raises(ValueError, match="could not be decoded"):
        await video_parts(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 500)
