"""Expert replies that would exhaust the bot, and errors named for what they are (issue 14).

Every fault goes through the real ``AsyncInferenceClient`` against an aiohttp stand-in that really
sends the bad reply (a 1 GiB body, a gzip bomb, a 25 MB caption, 200,000 boxes, a PNG that
declares 30000x30000 pixels); a sink that fails is a real sink whose disk "fails".
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from PIL import Image

from bot.errors import InputError, StorageError
from bot.uploads import inspect_upload
from pipeline.errors import ExpertError
from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.experts.hub import HubRunner
from tests.conftest import stored_upload, upload_limits

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadExpert:
    """``POST /models/{model}`` on 127.0.0.1, answered by ``handlers[model]``; counts requests and
    the body bytes each streamed answer managed to send before the client hung up."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.requests: list[str] = []
        self.sent: list[int] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> BadExpert:
        app = web.Application(client_max_size=64 * MiB)
        app.router.add_post(r"/models/{model:.+}", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        model = request.match_info["model"]
        self.requests.append(model)
        await request.read()
        return await self.handlers[model](request)

    def stream(self, total: int, content_type: str, *, declare_length: bool = False) -> Handler:
        """A handler streaming ``total`` bytes in 1 MiB chunks (the same buffer: the stand-in holds
        1 MiB, not ``total``); with ``declare_length`` it also sends ``Content-Length``."""

        async def handler(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": content_type})
            if declare_length:
                resp.content_length = total
            await resp.prepare(request)
            chunk = b"\x89PNG\r\n\x1a\n" + b"\0" * (MiB - 8)
            sent = 0
            try:
                while sent < total:
                    await resp.write(chunk)
                    sent += len(chunk)
                await resp.write_eof()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                self.sent.append(sent)
            return resp

        return handler

    @staticmethod
    def body(data: bytes, content_type: str = "application/json", **headers: str) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(body=data, headers={"Content-Type": content_type, **headers})

        return handler


@pytest.fixture
async def bad():
    async with BadExpert() as b:
        yield b


def runner(bad: BadExpert, **kw) -> HubRunner:
    base = dict(base_url=bad.url, task_timeout=20.0, max_attempts=3, backoff_max=0.05)
    return HubRunner(pipeline_config(Settings(inference={**base, **kw})))


def bomb_png(side: int = 30000) -> bytes:
    """A one-colour PNG declaring ``side`` x ``side`` pixels: under 1 MB on disk, 900 M pixels decoded."""
    buf = io.BytesIO()
    Image.new("L", (side, side)).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return bomb_png()


# -- 1. oversized bodies ---------------------------------------------------------------------------


async def test_oversized_media_reply_stops_at_the_limit(bad, sink):
    bad.handlers["big/t2i"] = bad.stream(1024 * MiB, "image/png")
    ex = runner(bad, max_media_bytes=2 * MiB)
    try:
        with pytest.raises(ExpertError) as ei:
            await ex.run("text-to-image", "big/t2i", {"text": "a cat"}, sink, task_id=1)
    finally:
        await ex.aclose()
    err = ei.value
    assert err.reason == "too_large" and not err.retryable
    assert err.user_message == "The model big/t2i's reply was larger than the limit of 2.1 MB, so it was not read."
    assert "[inference] max_media_bytes" in str(err)  # the operator's log names the setting
    assert bad.requests == ["big/t2i"], "a reply over the limit is not asked for again from the same model"
    for _ in range(100):
        if bad.sent:
            break
        await asyncio.sleep(0.02)
    assert bad.sent and bad.sent[0] < 256 * MiB, "the connection was closed long before the 1 GiB were sent"


async def test_declared_length_over_the_limit_is_refused_before_reading(bad, sink):
    bad.handlers["big/tts"] = bad.stream(100 * MiB, "audio/wav", declare_length=True)
    ex = runner(bad, max_media_bytes=MiB)
    try:
        with pytest.raises(ExpertError) as ei:
            await ex.run("text-to-speech", "big/tts", {"text": "hello"}, sink, task_id=1)
    finally:
        await ex.aclose()
    assert ei.value.reason == "too_large" and "1.0 MB" in ei.value.user_message
    assert "(stopped at 104857600 bytes)" in str(ei.value)  # the declared length, nothing read


async def test_json_reply_is_bounded_by_the_json_limit(bad, sink):
    # a text reply is bounded by the JSON limit, however large the media limit is
    caption = json.dumps([{"generated_text": "x" * (3 * MiB)}]).encode()
    bad.handlers["big/caption"] = bad.body(caption)
    ex = runner(bad, max_json_bytes=MiB, max_media_bytes=64 * MiB)
    try:
        with pytest.raises(ExpertError) as ei:
            await ex.run("summarization", "big/caption", {"text": "long"}, sink, task_id=1)
    finally:
        await ex.aclose()
    assert ei.value.reason == "too_large" and "[inference] max_json_bytes" in str(ei.value)


async def test_gzip_bomb_is_counted_as_it_inflates(bad, sink):
    inflated = b'[{"summary_text": "' + b"a" * (200 * MiB) + b'"}]'
    packed = gzip.compress(inflated, compresslevel=9)
    assert len(packed) < MiB // 2
    bad.handlers["zip/bomb"] = bad.body(packed, **{"Content-Encoding": "gzip"})
    bad.handlers["zip/fine"] = bad.body(gzip.compress(b'[{"summary_text": "short and sweet"}]'),
                                        **{"Content-Encoding": "gzip"})
    ex = runner(bad, max_json_bytes=MiB)
    try:
        with pytest.raises(ExpertError) as ei:
            await ex.run("summarization", "zip/bomb", {"text": "long"}, sink, task_id=1)
        fine = await ex.run("summarization", "zip/fine", {"text": "long"}, sink, task_id=2)
    finally:
        await ex.aclose()
    assert ei.value.reason == "too_large" and "1.0 MB" in ei.value.user_message
    assert fine.text == "short and sweet"


RSS_SCRIPT = textwrap.dedent(
    """
    import asyncio, resource, sys
    sys.path.insert(0, sys.argv[1])
    from tests.test_bounded_replies import BadExpert
    from pipeline.errors import ExpertError
    from bot.backends import pipeline_config
    from bot.settings import Settings
    from pipeline.experts.hub import HubRunner

    class Sink:
        async def add(self, data, **kw):
            raise AssertionError("nothing may be stored")

    async def main():
        async with BadExpert() as bad:
            bad.handlers["huge/t2i"] = bad.stream(1024 * 1024 * 1024, "image/png")
            ex = HubRunner(pipeline_config(Settings(inference=dict(base_url=bad.url, task_timeout=60))))  # default limits: 64 MiB media
            try:
                await ex.run("text-to-image", "huge/t2i", {"text": "a cat"}, Sink(), task_id=1)
            except ExpertError as e:
                print(e.user_message)
            finally:
                await ex.aclose()
        print("peak RSS MB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)

    asyncio.run(main())
    """
)


def test_one_gib_reply_in_a_process_ends_with_the_sentence(tmp_path):
    """The 1 GiB reply in a process of its own (client and stand-in): it ends with the sentence,
    no traceback. The peak RSS it prints is the benchmark's figure (not asserted here)."""
    script = tmp_path / "rss.py"
    script.write_text(RSS_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "0"}
    p = subprocess.run([sys.executable, str(script), str(ROOT)], capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "The model huge/t2i's reply was larger than the limit of 67.1 MB, so it was not read.", p.stdout
    assert lines[1].startswith("peak RSS MB ")


# -- 2. long text ----------------------------------------------------------------------------------


async def test_long_caption_is_cut_and_kept_as_a_file(bad, sink, media_dir):
    caption = ("A cat on a sofa. " + "It is a long story, told at length. " * 700_000)[:24_999_991] + " The end."
    bad.handlers["long/caption"] = bad.body(json.dumps([{"generated_text": caption}]).encode())
    photo = await stored_upload(sink, (media_dir / "chelsea.png").read_bytes(), "chelsea.png", None)
    ex = runner(bad, max_json_bytes=64 * MiB, max_text_chars=1000)
    try:
        out = await ex.run("image-to-text", "long/caption", {"image": photo}, sink, task_id=2)
    finally:
        await ex.aclose()
    assert len(caption) == 25_000_000 and len(out.text) <= 1000
    (full,) = out.files
    assert out.text.endswith(f"… [cut: 25,000,000 characters in all; the full text is {full.id}]")
    assert caption.strip().startswith(out.text.split("…")[0])
    assert full.kind == "text" and full.path.read_text(encoding="utf-8") == caption.strip()


# -- 3. many items ---------------------------------------------------------------------------------


async def test_two_hundred_thousand_boxes_are_cut_to_the_best(bad, sink, media_dir):
    rng = random.Random(7)
    boxes = [
        {"label": f"thing{i % 50}", "score": round(rng.random() * 0.9, 6),
         "box": {"xmin": i % 400, "ymin": i % 250, "xmax": i % 400 + 20, "ymax": i % 250 + 20}}
        for i in range(200_000)
    ]
    for i, j in enumerate(rng.sample(range(200_000), 5)):  # five clear winners anywhere in the list
        boxes[j]["score"] = 0.99 - i * 0.001
    bad.handlers["many/boxes"] = bad.body(json.dumps(boxes).encode())
    photo = await stored_upload(sink, (media_dir / "chelsea.png").read_bytes(), "chelsea.png", None)
    ex = runner(bad, max_json_bytes=64 * MiB, max_items=300, task_timeout=30)
    try:
        out = await asyncio.wait_for(ex.run("object-detection", "many/boxes", {"image": photo}, sink, task_id=3), 30)
    finally:
        await ex.aclose()
    assert len(out.data.items) == 300
    best = sorted((b["score"] for b in boxes), reverse=True)[:300]
    assert [o.score for o in out.data.items] == best
    assert out.text.startswith("thing") and "(only the 300 best-scored of 200,000 results are kept)" in out.text
    (drawn,) = out.files
    with Image.open(drawn.path) as im:
        assert im.size == (451, 300)


async def test_drawing_stops_when_its_task_is_cancelled(media_dir):
    """A timeout cancels the task; the worker thread drawing its boxes stops at the next box."""
    import threading

    from pipeline.tasks import drawing as render

    picture = (media_dir / "chelsea.png").read_bytes()
    boxes = [{"label": "x", "score": 0.5, "box": [1, 1, 50, 50]}] * 200_000
    ended, outcome = threading.Event(), []

    def draw(*args, stop):
        try:
            render.draw_boxes(*args, max_pixels=Settings().inference.max_image_pixels, stop=stop)
            outcome.append("finished")
        except render.Stopped:
            outcome.append("stopped")
        ended.set()

    task = asyncio.ensure_future(render.in_thread(draw, picture, boxes))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(ended.wait, 2.0), "the drawing went on after its task was cancelled"
    assert outcome == ["stopped"]


# -- 4. decompression bombs ------------------------------------------------------------------------


async def test_expert_image_over_the_pixel_limit_is_refused(bad, sink, bomb):
    bad.handlers["bomb/t2i"] = bad.body(bomb, "image/png")
    ex = runner(bad)
    try:
        with pytest.raises(ExpertError) as ei:
            await ex.run("text-to-image", "bomb/t2i", {"text": "a cat"}, sink, task_id=1)
    finally:
        await ex.aclose()
    assert ei.value.reason == "too_large" and not ei.value.retryable
    assert ei.value.user_message == "The model bomb/t2i returned an image with too many pixels to decode safely."
    assert "max_image_pixels" in str(ei.value)
    assert bad.requests == ["bomb/t2i"]


async def test_expert_image_under_pillow_limit_but_over_ours_is_refused(bad, sink):
    bad.handlers["big/t2i"] = bad.body(bomb_png(3000), "image/png")  # 9 M pixels
    ex = runner(bad, max_image_pixels=4_000_000)
    try:
        with pytest.raises(ExpertError) as ei:
            await ex.run("text-to-image", "big/t2i", {"text": "a cat"}, sink, task_id=1)
        ok = HubRunner(pipeline_config(Settings(inference=dict(base_url=bad.url, max_image_pixels=10_000_000))))
        try:
            out = await ok.run("text-to-image", "big/t2i", {"text": "a cat"}, sink, task_id=2)
        finally:
            await ok.aclose()
    finally:
        await ex.aclose()
    assert ei.value.reason == "too_large"
    assert "3000x3000" in out.files[0].description


async def test_uploaded_bomb_is_refused_before_decoding(bomb):
    with pytest.raises(InputError) as ei:
        await inspect_upload(bomb, "huge.png", "image/png", max_bytes=25 * MiB, **upload_limits())
    assert ei.value.user_message == (
        "The image huge.png has too many pixels to process safely; the limit is 40 million pixels "
        "([inference] max_image_pixels)."
    )
    small = bomb_png(3000)
    with pytest.raises(InputError) as ei:
        await inspect_upload(small, "big.png", None, max_bytes=25 * MiB, **upload_limits(max_pixels=1_000_000))
    assert "(3000x3000)" in ei.value.user_message and "1 million pixels" in ei.value.user_message
    info = await inspect_upload(small, "big.png", None, max_bytes=25 * MiB, **upload_limits(max_pixels=10_000_000))
    assert (info.width, info.height) == (3000, 3000)


# -- 5. storage failures are not the model's --------------------------------------------------------


class FailingSink:
    """A sink whose disk is full: every ``add`` raises the store's error."""

    def __init__(self) -> None:
        self.tries = 0

    async def add(self, data, **kw):
        self.tries += 1
        raise StorageError("The bot could not save a file: its disk is full.", "OSError: [Errno 28] No space left")


async def test_storage_failure_propagates_unchanged(bad, media_dir):
    png = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(png, format="PNG")
    bad.handlers["fine/t2i"] = bad.body(png.getvalue(), "image/png")
    sink = FailingSink()
    ex = runner(bad)
    try:
        with pytest.raises(StorageError) as ei:
            await ex.run("text-to-image", "fine/t2i", {"text": "a red square"}, sink, task_id=1)
    finally:
        await ex.aclose()
    assert ei.value.user_message == "The bot could not save a file: its disk is full."
    assert not isinstance(ei.value, ExpertError)
    assert sink.tries == 1 and bad.requests == ["fine/t2i"]


async def test_long_text_whose_file_cannot_be_saved_is_a_storage_error(bad):
    bad.handlers["long/sum"] = bad.body(json.dumps([{"summary_text": "word " * 10_000}]).encode())
    ex = runner(bad, max_text_chars=500)
    try:
        with pytest.raises(StorageError):
            await ex.run("summarization", "long/sum", {"text": "x"}, FailingSink(), task_id=1)
    finally:
        await ex.aclose()


# -- 6. HF_HUB_OFFLINE with a gateway ----------------------------------------------------------------


OFFLINE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    from tests.test_bounded_replies import BadExpert
    from pipeline.errors import ExpertError
    from bot.backends import pipeline_config
    from bot.settings import Settings
    from pipeline.experts.hub import HubRunner

    async def main():
        async with BadExpert() as bad:
            bad.handlers["org/sum"] = bad.body(json.dumps([{"summary_text": "gateway answer"}]).encode())
            gw = HubRunner(pipeline_config(Settings(inference=dict(base_url=bad.url, task_timeout=10))))
            hub = HubRunner(pipeline_config(Settings(inference=dict(provider="hf-inference", task_timeout=10, max_attempts=1))))
            try:
                out = await gw.run("summarization", "org/sum", {"text": "long"}, None, task_id=1)
                print("gateway:", out.text)
                try:
                    await hub.run("summarization", "org/sum", {"text": "long"}, None, task_id=2)
                except ExpertError as e:
                    print("provider:", e.user_message)
            finally:
                await gw.aclose()
                await hub.aclose()
            print("requests:", bad.requests)

    asyncio.run(main())
    """
)


def test_offline_mode_reaches_the_gateway_and_names_the_variable_otherwise(tmp_path):
    script = tmp_path / "offline.py"
    script.write_text(OFFLINE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, str(script), str(ROOT)], capture_output=True, text=True, timeout=60, env=env)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stdout.splitlines() == [
        "gateway: gateway answer",
        "provider: The model org/sum cannot be reached: HF_HUB_OFFLINE is set, which blocks calls to Hugging Face; "
        "unset it or configure [inference] base_url for your own gateway.",
        "requests: ['org/sum']",
    ], p.stdout + p.stderr


async def test_local_runner_lets_a_storage_failure_through(sink, media_dir):
    from pipeline.experts.local import LOCAL_MODEL, LocalRunner

    photo = await stored_upload(sink, (media_dir / "chelsea.png").read_bytes(), "chelsea.png", None)
    failing = FailingSink()
    with pytest.raises(StorageError):
        await LocalRunner(pipeline_config(Settings()).output).run("canny-control", LOCAL_MODEL, {"image": photo}, failing, task_id=1)
    assert failing.tries == 1
    with pytest.raises(ExpertError) as ei:
        await LocalRunner(pipeline_config(Settings(inference=dict(max_image_pixels=100_000))).output).run("canny-control", LOCAL_MODEL, {"image": photo}, sink, task_id=2)
    assert ei.value.reason == "too_large"
