"""A video's readable parts, from real clips: its sound track (FLAC, 16 kHz mono) and frames
spread over its length."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import av
import pytest
from PIL import Image

from bot.settings import Settings
from pipeline.types import Resource
from pipeline.video_parts import SOUND_RATE, add_video_parts, extract_parts, video_parts

MEDIA = Path(__file__).parent / "fixtures" / "media"


def test_a_clip_with_speech_gives_its_sound_and_three_frames():
    parts = extract_parts((MEDIA / "rocket_speech.mp4").read_bytes(), max_pixels=Settings().inference.max_image_pixels)
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
    parts = extract_parts((MEDIA / "rocket_zoom.mp4").read_bytes(), max_pixels=Settings().inference.max_image_pixels, frames=4, max_side=200)
    assert parts.sound is None and parts.sound_seconds == 0
    assert len(parts.frames) == 4 and all(max(f.width, f.height) == 200 for f in parts.frames)
    first, last = (Image.open(io.BytesIO(f.png)).convert("L") for f in (parts.frames[0], parts.frames[-1]))
    assert first.tobytes() != last.tobytes()  # the clip zooms: the frames differ


def test_a_long_sound_is_cut_at_the_limit():
    parts = extract_parts((MEDIA / "rocket_speech.mp4").read_bytes(), max_pixels=Settings().inference.max_image_pixels, max_sound_seconds=2)
    assert parts.sound_cut and parts.sound_seconds == 2.0


async def test_garbage_is_one_sentence(decoder):
    with pytest.raises(ValueError) as info:
        await video_parts(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 500, decoder=decoder)
    assert info.value.user_message == "The video could not be decoded (InvalidDataError)."


class _Folder:
    """A resource sink writing into a folder, numbering ids per kind as the stores do."""

    def __init__(self, root: Path) -> None:
        self.root, self.count = root, {}

    async def add(self, data, *, kind, mime, origin, description, name=None):
        self.count[kind] = self.count.get(kind, 0) + 1
        path = self.root / f"{kind}-{self.count[kind]}"
        path.write_bytes(data)
        return Resource(id=path.name, kind=kind, path=path, mime=mime, size=len(data), origin=origin,
                        description=description, name=name)


async def test_a_video_of_the_turn_adds_its_sound_and_frames_as_resources(tmp_path, decoder):
    src = tmp_path / "talk.mp4"
    src.write_bytes((MEDIA / "rocket_speech.mp4").read_bytes())
    video = Resource(id="video-1", kind="video", path=src, mime="video/mp4", size=src.stat().st_size)
    photo = Resource(id="image-9", kind="image", path=MEDIA / "chelsea.png", mime="image/png", size=1)
    parts, notes = await add_video_parts([photo, video], _Folder(tmp_path), decoder=decoder)
    assert notes == []
    assert [(p.id, p.kind, p.origin) for p in parts] == [
        ("audio-1", "audio", "video-1"), ("image-1", "image", "video-1"), ("image-2", "image", "video-1"),
        ("image-3", "image", "video-1")]
    assert parts[0].description == "sound of video-1, 5.1 s"
    assert parts[2].description == "frame of video-1 at 2.9 s, 320x400 pixels"
    with av.open(str(parts[0].path)) as c:
        assert c.format.name == "flac"
    assert Image.open(parts[3].path).size == (320, 400)


async def test_an_unreadable_video_is_said_and_the_rest_goes_on(tmp_path, decoder):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 200)
    silent = tmp_path / "zoom.mp4"
    silent.write_bytes((MEDIA / "rocket_zoom.mp4").read_bytes())
    files = [Resource(id="video-1", kind="video", path=bad, mime="video/mp4", size=1),
             Resource(id="video-2", kind="video", path=silent, mime="video/mp4", size=1)]
    parts, notes = await add_video_parts(files, _Folder(tmp_path), decoder=decoder, frames=2)
    assert notes == ["The sound and frames of video-1 could not be read (it could not be decoded), so only the video "
                     "itself can be used."]
    assert [(p.kind, p.origin) for p in parts] == [("image", "video-2"), ("image", "video-2")]  # no sound track


def test_run_transcribes_the_sound_of_a_video_and_captions_its_frames(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "run", "--sandbox", "--json",
                        "Transcribe what is said in this video and describe what it shows",
                        "--file", str(MEDIA / "rocket_speech.mp4")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    record = json.loads(p.stdout)
    args = {t["task"]: t["args"] for t in record["tasks"]}
    assert args["automatic-speech-recognition"] == {"audio": "audio-1"}  # the video's sound, not the video
    assert args["image-to-text"]["image"].startswith("image-")
    texts = [r["output"]["text"] for r in record["results"].values() if r["status"] == "ok"]
    assert any("5.1 s of audio" in t for t in texts), texts  # the stand-in transcribes the 5.05 s sound track
