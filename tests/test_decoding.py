"""Media decoding that ends (:mod:`pipeline.decoding`): crafted videos and PDFs built here, read
on the real code paths (the decoder's worker processes, the upload checks, ``hugginggpt serve``).

The stuck video is what made a server stop serving files: 4K frames behind a single keyframe,
so every frame asked for means decoding all those before it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bot.errors import InputError
from bot.uploads import inspect_upload
from bot.settings import Settings
from tests.conftest import upload_limits
from pipeline.decoding import Decoder, DecodeError
from pipeline.media import stream_info
from pipeline.video_parts import video_parts
from benchmarks.harness.crafted_files import single_keyframe_video, text_page_pdf

MEDIA = Path(__file__).parent / "fixtures" / "media"


@pytest.fixture(scope="module")
def stuck_video() -> bytes:
    """12 s of 4K behind one keyframe: a few seconds of decoding for three frames, 35 KB."""
    return single_keyframe_video(3840, 2160, 300)


async def test_a_stuck_video_is_stopped_and_other_work_goes_on(stuck_video):
    """Eight stuck decodes at once (the eight ``/mcp`` calls of the report): each ends at its
    timeout with one sentence, a probe of another file and the loop's own threads are served
    meanwhile."""
    async with Decoder(max_pixels=Settings().inference.max_image_pixels, workers=2, timeout=0.5) as decoder:
        started = time.monotonic()
        stuck = [asyncio.create_task(video_parts(stuck_video, decoder=decoder)) for _ in range(8)]
        await asyncio.sleep(0.1)
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 1.0) == "free"  # no thread is held
        done = await asyncio.gather(*stuck, return_exceptions=True)
        elapsed = time.monotonic() - started
    assert all(isinstance(e, DecodeError) and e.reason == "timeout" for e in done), done
    assert done[0].user_message == "Decoding the video took too long (more than 0.5 s)."
    assert elapsed < 4.0  # eight jobs of 0.5 s at most (the waiting ones count their wait), not eight decodes
    async with Decoder(max_pixels=Settings().inference.max_image_pixels, workers=2, timeout=30) as decoder:
        stuck = asyncio.create_task(video_parts(stuck_video, decoder=decoder))
        await asyncio.sleep(0.2)
        clip = (MEDIA / "rocket_zoom.mp4").read_bytes()
        info = await asyncio.wait_for(decoder.run(stream_info, clip, what="the clip"), 2.0)
        assert info["streams"][0]["width"] == 320 and not stuck.done()
        await decoder.close()  # shutdown: the job still running is killed
        with pytest.raises(DecodeError) as closed:
            await asyncio.wait_for(stuck, 5.0)
    assert closed.value.user_message == "The server is shutting down, so the video was not read."


async def test_frames_over_the_pixel_limit_are_refused_before_decoding(stuck_video, caplog):
    async with Decoder(max_pixels=1_000_000) as decoder:
        with pytest.raises(DecodeError) as info:
            await video_parts(stuck_video, decoder=decoder)
        assert info.value.reason == "too_large"
        assert info.value.user_message == ("The video's frames are 3840x2160 pixels, more than the limit of 1 million "
                                           "pixels ([inference] max_image_pixels).")
        with pytest.raises(InputError) as upload:
            await inspect_upload(stuck_video, "clip.mp4", None, max_bytes=1 << 25, **upload_limits(max_pixels=1_000_000), decoder=decoder)
    assert upload.value.user_message == ("The clip.mp4 has frames of 3840x2160 pixels, more than the limit of 1 million "
                                         "pixels ([inference] max_image_pixels).")
    async with Decoder(max_pixels=Settings().inference.max_image_pixels) as decoder:  # within the limit: read, and the frames scaled to max_side by the decoder
        parts = await video_parts(single_keyframe_video(1280, 720, 50), decoder=decoder, max_side=64)
    assert [(f.width, f.height) for f in parts.frames] == [(64, 36)] * 3, parts.frames


async def test_a_job_over_the_memory_ceiling_is_one_sentence():
    """A 200-inch page asked for at full size needs 1.9 GB: the worker hits its ceiling, the
    service gets one sentence and keeps its own memory."""
    from bot.documents import expand_documents
    from bot.incoming import IncomingFile
    from benchmarks.harness.crafted_files import huge_page_pdf
    from tests.test_documents import docs

    async with Decoder(memory_bytes=512 * 1024 * 1024, max_pixels=1_000_000_000) as decoder:
        with pytest.raises(InputError) as info:
            await expand_documents([IncomingFile(huge_page_pdf(), name="poster.pdf")], docs(), decoder)
    assert info.value.user_message == "Decoding the poster.pdf needs more memory than the limit of 512 MiB."


def _serve(tmp_path: Path, **env: str) -> tuple[subprocess.Popen, str]:
    environ = {**os.environ, "PYTHONPATH": os.getcwd(), "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), **env}
    proc = subprocess.Popen([sys.executable, "-m", "hugginggpt", "serve", "--sandbox", "--port", "0", "--grace", "2"],
                            cwd=tmp_path, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+)/v1", line)
    assert m, line + proc.stderr.read()
    return proc, m.group(1)


def slow_pdf() -> bytes:
    """A 60 KB PDF whose one page holds 20 million text operators (seconds of parsing)."""
    from benchmarks.harness.crafted_files import many_operators_pdf

    return many_operators_pdf(20_000_000)


def test_serve_answers_others_while_a_decode_is_stuck_and_stops_in_its_grace(tmp_path):
    """``hugginggpt serve``: while a PDF keeps a decoder busy, ``/readyz`` answers and a request
    with a photo is served; SIGTERM then stops the process within its grace period."""
    import base64
    import json
    import threading

    proc, url = _serve(tmp_path, HUGGINGGPT_DOCUMENTS__MAX_PAGE_CONTENT_BYTES=str(256 * 1024 * 1024))
    try:
        def post(content: list) -> tuple[int, dict]:
            body = json.dumps({"model": "hugginggpt", "messages": [{"role": "user", "content": content}]}).encode()
            req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, {"body": e.read().decode(errors="replace")}
            except OSError as e:  # the server went away under the stuck request
                return 0, {"error": repr(e)}

        pdf = "data:application/pdf;base64," + base64.b64encode(slow_pdf()).decode()
        stuck = threading.Thread(target=post, args=([{"type": "text", "text": "Summarise this"},
                                                      {"type": "image_url", "image_url": {"url": pdf}}],), daemon=True)
        stuck.start()
        time.sleep(1.5)
        t0 = time.monotonic()
        with urllib.request.urlopen(url + "/readyz", timeout=10) as r:
            assert r.status == 200
        photo = "data:image/png;base64," + base64.b64encode((MEDIA / "chelsea.png").read_bytes()).decode()
        status, body = post([{"type": "text", "text": "Describe this photo"}, {"type": "image_url", "image_url": {"url": photo}}])
        assert status == 200 and body["choices"][0]["message"]["content"], body
        assert time.monotonic() - t0 < 30 and stuck.is_alive()  # the PDF is still being read
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert time.monotonic() - t0 < 2 + 5  # the grace period, and closing
        stuck.join(10)
        assert not stuck.is_alive()
    finally:
        if proc.poll() is None:
            proc.kill()
