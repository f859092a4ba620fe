"""The media store and upload checks, on the real fixture media."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import os

import pytest
from PIL import Image

from bot.errors import InputError, StorageError
from bot.store import LocalResourceSink
from bot.uploads import inspect_upload
from tests.conftest import stored_upload, upload_limits
from pipeline.types import Resource

LIMIT = 25 << 20


@pytest.mark.parametrize(
    "name,kind,mime,description",
    [
        ("chelsea.png", "image", "image/png", "image chelsea.png, 451x300 pixels"),
        ("rocket.jpg", "image", "image/jpeg", "image rocket.jpg, 640x427 pixels"),
        ("speech_cat_request.ogg", "audio", "audio/ogg", "audio speech_cat_request.ogg, 5.8 s"),
        ("speech_cat_request.wav", "audio", "audio/wav", "audio speech_cat_request.wav, 5.8 s"),
        ("speech_weather.mp3", "audio", "audio/mpeg", "audio speech_weather.mp3, 5.0 s"),
        ("rocket_zoom.mp4", "video", "video/mp4", "video rocket_zoom.mp4, 2.0 s, 320x400 pixels"),
    ],
)
async def test_real_files_are_accepted_and_described(media_dir, name, kind, mime, description):
    info = await inspect_upload((media_dir / name).read_bytes(), name, None, max_bytes=LIMIT, **upload_limits())
    assert (info.kind, info.mime, info.description) == (kind, mime, description)


async def test_empty_file_is_refused():
    with pytest.raises(InputError) as ei:
        await inspect_upload(b"", "cat.png", "image/png", max_bytes=LIMIT, **upload_limits())
    assert ei.value.user_message == "The cat.png is empty."


async def test_oversized_file_names_the_limit(media_dir):
    data = (media_dir / "chelsea.png").read_bytes()
    with pytest.raises(InputError) as ei:
        await inspect_upload(data, "chelsea.png", None, max_bytes=200 * 1024, **upload_limits())
    assert ei.value.user_message == "The chelsea.png is 0.2 MiB, more than the limit of 0.195312 MiB."
    with pytest.raises(InputError) as ei:
        await inspect_upload(b"x" * (2 << 20), "big.png", None, max_bytes=1 << 20, **upload_limits())
    assert ei.value.user_message == "The big.png is 2.0 MiB, more than the limit of 1 MiB."


async def test_html_named_png_is_refused():
    html = b"<!DOCTYPE html><html><body>Not an image</body></html>"
    with pytest.raises(InputError) as ei:
        await inspect_upload(html, "photo.png", "image/png", max_bytes=LIMIT, **upload_limits())
    assert ei.value.user_message == "The photo.png is an HTML page, not an image, audio, video or text file."


@pytest.mark.parametrize("lead", [b"", b"{", b" ["])  # random bytes that happen to start like JSON are not JSON
async def test_unreadable_bytes_read_as_one_sentence(lead):
    noise = lead + bytes(range(128, 256)) * 40  # no known signature, not UTF-8
    with pytest.raises(InputError) as ei:
        await inspect_upload(noise, None, "image/png", max_bytes=LIMIT, **upload_limits())
    assert ei.value.user_message == "The file is of a kind I cannot read, not an image, audio, video or text file."


@pytest.mark.parametrize(
    "data,what",
    [(b"%PDF-1.7\n1 0 obj\n", "a PDF document"), (b"PK\x03\x04rest-of-zip", "a ZIP archive"), (b"hello there", "plain text")],
)
async def test_unsupported_types_are_refused(data, what):
    with pytest.raises(InputError) as ei:
        await inspect_upload(data, "thing.bin", None, max_bytes=LIMIT, **upload_limits())
    assert what in ei.value.user_message


async def test_audio_named_png_is_refused(media_dir):
    data = (media_dir / "speech_weather.wav").read_bytes()
    with pytest.raises(InputError) as ei:
        await inspect_upload(data, "picture.png", None, max_bytes=LIMIT, **upload_limits())
    assert ei.value.user_message == "The picture.png is labelled as image (extension .png) but its content is an audio file."


async def test_jpeg_named_png_is_fine_content_wins(media_dir):
    info = await inspect_upload((media_dir / "rocket.jpg").read_bytes(), "rocket.png", "image/png", max_bytes=LIMIT, **upload_limits())
    assert info.mime == "image/jpeg" and info.kind == "image"


async def test_truncated_png_is_refused(media_dir):
    data = (media_dir / "chelsea.png").read_bytes()
    with pytest.raises(InputError) as ei:
        await inspect_upload(data[: len(data) // 2], "chelsea.png", None, max_bytes=LIMIT, **upload_limits())
    assert "could not be decoded" in ei.value.user_message


async def test_truncated_audio_header_is_refused(media_dir):
    data = (media_dir / "rocket_zoom.mp4").read_bytes()[:200]
    with pytest.raises(InputError):
        await inspect_upload(data, "clip.mp4", None, max_bytes=LIMIT, **upload_limits())


async def test_probing_leaves_no_temporary_file_even_when_the_file_is_refused(media_dir, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where probe files go, for this test only
    info = await inspect_upload((media_dir / "rocket_zoom.mp4").read_bytes(), "clip.mp4", None, max_bytes=LIMIT, **upload_limits())
    assert info.description == "video clip.mp4, 2.0 s, 320x400 pixels"
    with pytest.raises(InputError) as ei:
        await inspect_upload((media_dir / "rocket_zoom.mp4").read_bytes()[:200], "clip.mp4", None, max_bytes=LIMIT, **upload_limits())
    assert ei.value.user_message == "The clip.mp4 could not be read as video; it may be truncated or corrupt."
    assert list(tmp_path.iterdir()) == []


async def test_a_probe_that_takes_too_long_is_one_sentence(media_dir, decoder):
    from bot.uploads import probe

    with pytest.raises(InputError) as ei:
        await probe(media_dir / "rocket_zoom.mp4", decoder, timeout=0.001)
    assert ei.value.user_message == "The file could not be read as audio or video: inspecting it took too long."
    info = await probe(media_dir / "rocket_zoom.mp4", decoder)
    assert any(s["codec_type"] == "video" for s in info["streams"])


async def test_decompression_bomb_limit_is_respected(media_dir, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    with pytest.raises(InputError) as ei:
        await inspect_upload((media_dir / "chelsea.png").read_bytes(), "chelsea.png", None, max_bytes=LIMIT, **upload_limits())
    assert "too many pixels" in ei.value.user_message


# -- the store -----------------------------------------------------------------------------------


async def test_put_is_content_addressed_and_idempotent(store, media_dir):
    data = (media_dir / "rocket.jpg").read_bytes()
    p1 = await store.put(data, "image/jpeg")
    p2 = await store.put(data, "image/jpeg")
    digest = hashlib.sha256(data).hexdigest()
    assert p1 == p2 == (store.root / "media" / digest[:2] / f"{digest}.jpg").resolve()
    assert p1.read_bytes() == data
    assert [p.name for p in p1.parent.iterdir()] == [p1.name]


async def test_cancelled_write_leaves_no_temporary_file(store):
    data = os.urandom(1 << 20) * 64  # 64 MiB: written in 1 MiB chunks
    media = store.root / "media"

    def temp_files():
        return [p for p in media.rglob("*.tmp")] if media.exists() else []

    task = asyncio.create_task(store.put(data, "video/mp4"))
    for _ in range(5000):
        if temp_files():
            break
        await asyncio.sleep(0.0005)
    else:
        pytest.fail("the write finished before its temporary file was seen")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    files = [p for p in media.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(".tmp")]
    for p in files:  # anything under a final name is complete
        assert p.stat().st_size == len(data)


async def test_disk_full_is_a_storage_error(store, monkeypatch):
    # The kernel reports a full disk at write or, with delayed allocation, at fsync; the store
    # writes through aiofiles (C-level file objects), so the failure is injected at os.fsync.
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError) as ei:
        await store.put(b"abc", "text/plain")
    assert ei.value.user_message == "The bot's media storage is full, so the file could not be saved."
    monkeypatch.undo()
    assert not [p for p in (store.root / "media").rglob("*") if p.is_file()]


# -- the sink ------------------------------------------------------------------------------------


async def test_sink_ids_continue_after_existing_resources(store, media_dir, tmp_path):
    existing = [
        Resource(id="image-1", kind="image", path=tmp_path / "a.png", mime="image/png", size=1),
        Resource(id="image-3", kind="image", path=tmp_path / "b.png", mime="image/png", size=1),
        Resource(id="audio-1", kind="audio", path=tmp_path / "c.wav", mime="audio/wav", size=1),
    ]
    sink = LocalResourceSink(store, existing)
    cat = await stored_upload(sink, (media_dir / "chelsea.png").read_bytes(), "chelsea.png", "image/png", LIMIT)
    speech = await stored_upload(sink, (media_dir / "speech_weather.mp3").read_bytes(), "weather.mp3", None, LIMIT)
    clip = await stored_upload(sink, (media_dir / "rocket_zoom.mp4").read_bytes(), None, "video/mp4", LIMIT)
    assert (cat.id, speech.id, clip.id) == ("image-4", "audio-2", "video-1")
    assert cat.origin == "user" and cat.name == "chelsea.png" and cat.description == "image chelsea.png, 451x300 pixels"
    assert clip.description == "video (mp4), 2.0 s, 320x400 pixels"
    assert cat.path.read_bytes() == (media_dir / "chelsea.png").read_bytes()
    gen = await sink.add(b"RIFF0000WAVE", kind="audio", mime="audio/wav", origin="task:2", description="x")
    assert gen.id == "audio-3" and gen.path.suffix == ".wav"
    assert [r.id for r in sink.resources] == ["image-4", "audio-2", "video-1", "audio-3"]
    with Image.open(io.BytesIO(cat.path.read_bytes())) as im:
        assert im.size == (451, 300)


async def test_sink_accepts_counts(store):
    sink = LocalResourceSink(store, {"image": 7})
    r = await sink.add(b"\x89PNG....", kind="image", mime="image/png", origin="task:1", description="d")
    assert r.id == "image-8"
