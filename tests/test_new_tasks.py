"""Today's Hugging Face tasks: ``image-text-to-image``, ``image-text-to-video``,
``video-to-video``, ``video-text-to-text`` and ``audio-text-to-text``, each run end to end through
the real ``huggingface_hub`` client against the stand-ins (the Hub's provider mapping, the router,
fal-ai's queue, a gateway in the Hugging Face wire format): a user's file in, the stored file or the
answer a user gets out."""

from __future__ import annotations

import pytest

from bot.backends import pipeline_config
from bot.settings import Settings
from bot.uploads import probe
from pipeline.catalog.availability import Availability
from pipeline.catalog.models import Catalog, ModelCard
from pipeline.errors import ExpertError
from pipeline.experts.hub import HubRunner
from pipeline.experts.providers import ProviderPolicy
from pipeline.experts.routing import RoutingRunner
from pipeline.selection import Selector
from sandbox.inference import InferenceStandIn
from tests.conftest import media_file, stored_upload
from tests.standins.hub import HubStandIn
from tests.standins.loopback import redirect_hub

TOKEN = "hf_newtasksSECRET"


def hub_model(mid: str, tag: str, provider: str, mapped_task: str) -> dict:
    """A Hub model tagged ``tag`` whose provider mapping names ``mapped_task`` (what the router's
    helper is: ``image-to-image`` for instruction edits, ``conversational`` for chat models)."""
    pid = f"{provider}/{mid.split('/')[-1]}"
    return {"id": mid, "downloads": 10, "likes": 1, "tags": [tag], "cardData": {}, "pipeline_tag": tag,
            "mappings": [{"provider": provider, "providerId": pid, "status": "live", "task": mapped_task}]}


MODELS = [
    hub_model("acme/kontext", "image-text-to-image", "fal-ai", "image-to-image"),
    hub_model("acme/i2v", "image-text-to-video", "fal-ai", "image-to-video"),
    hub_model("acme/video-vlm", "video-text-to-text", "together", "conversational"),
    hub_model("acme/audio-lm", "audio-text-to-text", "together", "conversational"),
    hub_model("acme/restyle", "video-to-video", "fal-ai", "video-to-video"),
]


@pytest.fixture
async def providers():
    """``(routing runner, selector, inference stand-in)`` on Inference Providers (policy ``auto``)."""
    async with HubStandIn(MODELS) as hub, InferenceStandIn() as standin:
        with redirect_hub(standin.url, hub.url) as transport:
            av = Availability(provider="auto", base_url=None, endpoints={}, token=TOKEN, hub_endpoint=hub.url,
                              policy=ProviderPolicy("auto"))
            runner = HubRunner(pipeline_config(Settings(inference=dict(
                provider="auto", token=TOKEN, max_attempts=1, task_timeout=30, backoff_max=0.01,
                router_url="https://router.huggingface.co"))), transport=transport)
            cards = Catalog([ModelCard(m["id"], m["pipeline_tag"], 10, 1, "d", None, ()) for m in MODELS])
            selector = Selector(cards, av, None, strategy="top", top_k=3, mode="providers")
            try:
                yield RoutingRunner(runner, selector.placement), selector, standin
            finally:
                await runner.aclose()


async def test_an_instruction_edit_on_fal_ai_comes_back_as_a_stored_png(providers, sink):
    routing, _, standin = providers
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    out = await routing.run("image-text-to-image", "acme/kontext", {"image": image, "text": "make the cat blue"}, sink,
                            task_id=1)
    (edited,) = out.files
    assert out.where == "provider fal-ai"
    assert edited.kind == "image" and edited.mime == "image/png" and edited.path.read_bytes() != photo.data
    assert edited.description.startswith(f"{image.id} edited as 'make the cat blue'")
    # fal's queue got the mapped app id, the instruction and the image (FalAIImageToImageTask)
    assert [(r.model, r.task, r.status, r.asked) for r in standin.records] == [
        ("fal-ai/kontext", "image-to-image", 200, "make the cat blue")]


async def test_an_image_and_a_description_become_a_real_mp4_on_fal_ai(providers, sink, decoder):
    routing, _, standin = providers
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    out = await routing.run("image-text-to-video", "acme/i2v", {"image": image, "text": "the cat jumps"}, sink, task_id=1)
    (video,) = out.files
    info = await probe(video.path, decoder)
    assert video.mime == "video/mp4" and any(s["codec_type"] == "video" for s in info["streams"])
    assert video.description == f"video from {image.id}: 'the cat jumps'"
    assert [(r.model, r.task, r.asked) for r in standin.records] == [("fal-ai/i2v", "image-to-video", "the cat jumps")]


async def test_a_video_question_is_answered_by_a_video_vlm_through_the_router(providers, sink):
    routing, _, standin = providers
    clip = media_file("rocket_zoom.mp4")
    video = await stored_upload(sink, clip.data, clip.name, None)
    out = await routing.run("video-text-to-text", "acme/video-vlm", {"video": video, "text": "What happens?"}, sink,
                            task_id=1)
    # the stand-in VLM read the video's own frames (a zoom moves) from the data: URI it was sent
    assert out.text == "[sandbox] reply to: [sandbox video vlm] What happens? -> watched a moving scene"
    assert (standin.records[-1].task, standin.records[-1].provider) == ("conversational", "auto")


async def test_a_recording_question_is_answered_by_an_audio_model_through_the_router(providers, sink):
    routing, _, _ = providers
    rec = media_file("speech_weather.wav")
    audio = await stored_upload(sink, rec.data, rec.name, None)
    out = await routing.run("audio-text-to-text", "acme/audio-lm", {"audio": audio, "text": "Who speaks?"}, sink,
                            task_id=1)
    assert out.text.startswith("[sandbox] reply to: [sandbox audio lm] Who speaks? -> heard ")
    assert " s of audio" in out.text


async def test_video_to_video_has_no_provider_path_and_says_so(providers, sink):
    routing, selector, _ = providers
    clip = media_file("rocket_zoom.mp4")
    video = await stored_upload(sink, clip.data, clip.name, None)
    served = await selector.served_tasks()
    assert {"image-text-to-image", "image-text-to-video", "video-text-to-text", "audio-text-to-text"} <= served
    assert "video-to-video" not in served  # huggingface_hub 2.4 has no provider helper for it
    with pytest.raises(ExpertError) as err:
        await routing.hub.run("video-to-video", "acme/restyle", {"video": video, "text": "as a cartoon"}, sink, task_id=1)
    assert err.value.reason == "unavailable"
    assert str(err.value) == "No Inference Provider serves video-to-video; configure an endpoint for it."


@pytest.mark.parametrize("task, model, inputs, kind, mime", [
    ("image-text-to-image", "sandbox/pix2pix", {"image": "chelsea.png", "text": "make it night"}, "image", "image/png"),
    ("image-text-to-video", "sandbox/i2v-wan", {"image": "chelsea.png", "text": "the cat turns"}, "video", "video/mp4"),
    ("video-to-video", "sandbox/vace", {"video": "rocket_zoom.mp4", "text": "as a cartoon"}, "video", "video/mp4"),
])
async def test_a_gateway_in_the_hugging_face_wire_format_serves_the_generating_tasks(standin, sink, decoder, task, model,
                                                                                     inputs, kind, mime):
    runner = HubRunner(pipeline_config(Settings(inference=dict(provider="hf-inference", token=TOKEN, base_url=standin.url,
                                                               endpoints={}, task_timeout=30, max_attempts=1))))
    standin.task_of[model] = task
    try:
        args = {}
        for key, value in inputs.items():
            f = media_file(value) if key != "text" else None
            args[key] = await stored_upload(sink, f.data, f.name, None) if f is not None else value
        out = await runner.run(task, model, args, sink, task_id=1)
    finally:
        await runner.aclose()
    (made,) = out.files
    assert (made.kind, made.mime) == (kind, mime) and made.path.stat().st_size > 0
    if kind == "video":
        info = await probe(made.path, decoder)
        assert any(s["codec_type"] == "video" for s in info["streams"])
    assert (standin.records[-1].task, standin.records[-1].status) == (task, 200)


# -- the planner is told about them ---------------------------------------------------------------

def _system_prompt(available: set[str]) -> str:
    from pipeline.planning import planning_messages
    from pipeline.types import Request

    return planning_messages(Request(text="What happens in the clip?"), frozenset(available))[0]["content"]


def test_the_planner_lists_the_new_tasks_and_sends_a_video_question_to_a_video_vlm_only_when_served():
    from pipeline.tasks import TASKS

    text = _system_prompt(set(TASKS))
    for task in ("image-text-to-image", "image-text-to-video", "video-to-video", "video-text-to-text", "audio-text-to-text"):
        assert f"- {task}: {TASKS[task].description}; args" in text
    assert "- video-text-to-text: " in text and "args video, text\n" in text
    assert "goes to\n  video-text-to-text with the video itself" in text
    assert "audio-text-to-text with the audio and the question" in text

    frames_only = _system_prompt(set(TASKS) - {"video-text-to-text", "audio-text-to-text", "image-text-to-image"})
    assert "video-text-to-text" not in frames_only and "audio-text-to-text" not in frames_only
    assert "the frames to image tasks (what is shown)" in frames_only.replace("\n  ", " ")  # the video_parts path


def test_the_sandbox_planner_asks_a_video_vlm_when_served_and_classifies_the_video_otherwise():
    from pipeline.tasks import TASKS
    from sandbox.planning import plan_tasks

    video = [{"id": "video-1", "kind": "video", "name": "clip.mp4", "origin": "user"}]
    served = plan_tasks("What is happening in this video?", video, list(TASKS), first_turn=True)
    assert served == [{"task": "video-text-to-text", "id": 0, "dep": [-1],
                       "args": {"video": "video-1", "text": "What is happening in this video"}}]
    frames = plan_tasks("What is happening in this video?", video, [t for t in TASKS if t != "video-text-to-text"],
                        first_turn=True)
    assert [t["task"] for t in frames] == ["video-classification"]


# -- hugginggpt catalog show --coverage -------------------------------------------------------------

async def _coverage(settings_overrides: dict, hub_url: str) -> dict[str, str]:
    import argparse
    import io

    from bot.settings import load_settings
    from hugginggpt.catalog import add_parser, main

    parser = argparse.ArgumentParser(prog="hugginggpt")
    add_parser(parser.add_subparsers(dest="command"))
    out = io.StringIO()
    args = parser.parse_args(["catalog", "show", "--coverage", "--hub-endpoint", hub_url])
    assert await main(args, load_settings(env={}, overrides=settings_overrides), stdout=out) == 0
    lines = out.getvalue().splitlines()
    return {line.split(None, 1)[0]: line.split(None, 1)[1] for line in lines[:-1]} | {"": lines[-1]}


async def test_coverage_says_per_task_whether_providers_the_expert_server_or_neither_runs_it(tmp_path):
    import json

    from tests.standins.expert_server import ExpertServerStandIn, model as listed

    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text("\n".join(json.dumps({"id": m["id"], "task": m["pipeline_tag"], "downloads": 10, "likes": 1,
                                              "description": "d", "providers": None, "tags": []}) for m in MODELS))
    with ExpertServerStandIn([listed("tiny/pix2pix", "image-text-to-image", library="diffusers")]) as server:
        async with HubStandIn(MODELS) as hub:
            base = {"catalog": {"path": str(catalog)}}
            hybrid = await _coverage({**base, "inference": {"provider": "auto", "token": TOKEN, "mode": "hybrid",
                                                            "experts_url": [server.url]}}, hub.url)
            local = await _coverage({**base, "inference": {"provider": "auto", "token": TOKEN, "mode": "local",
                                                           "experts_url": [server.url]}}, hub.url)
    assert hybrid["image-text-to-image"] == (f"providers: acme/kontext on provider fal-ai  expert server: tiny/pix2pix on "
                                             f"local {server.url}")
    assert hybrid["image-text-to-video"] == "providers: acme/i2v on provider fal-ai  expert server: -"
    assert hybrid["video-text-to-text"] == "providers: acme/video-vlm on provider auto  expert server: -"
    assert hybrid["audio-text-to-text"] == "providers: acme/audio-lm on provider auto  expert server: -"
    assert hybrid["video-to-video"] == ("neither (no Inference Provider helper of the installed huggingface_hub runs it "
                                        "(an endpoint, a gateway or an expert server can); the expert servers list no "
                                        "model for it)")
    assert hybrid["object-detection"] == "neither (the catalog has no model for it; the expert servers list no model for it)"
    assert hybrid["canny-control"] == "in-process (computed without a model)"
    # four new tasks, canny-control in-process and the five text tasks the controller LLM does itself
    assert hybrid[""] == "10 of 49 tasks can run now (provider auto, mode hybrid)."
    assert hybrid["summarization"] == "the controller LLM ([inference] controller_tasks)"
    # the same catalog with mode = "local": only what the expert server lists
    assert local["image-text-to-image"] == f"providers: -  expert server: tiny/pix2pix on local {server.url}"
    assert local["image-text-to-video"] == ('neither (providers are not used ([inference] mode = "local"); the expert '
                                            'servers list no model for it)')


# -- on the team's expert server, a tiny InstructPix2Pix -------------------------------------------

async def test_an_instruction_edit_runs_on_the_expert_server_with_a_tiny_instruct_pix2pix(tmp_path, sink):
    """A tiny random InstructPix2Pix (benchmarks/harness/tinymodels.py) whose card says
    ``image-text-to-image``: the expert server lists it for that task and the bot's client gets an
    edited PNG of the photo's size back."""
    from PIL import Image

    from benchmarks.harness import tinymodels
    from tests.test_expert_server import Server

    cache = tmp_path / "hf-cache"
    tinymodels.build_cache(cache, {"tiny/instruct-pix2pix": tinymodels.REPOS["tiny/instruct-pix2pix"]})
    srv = Server(cache, 'default_parameters = {"image-text-to-image" = {"num_inference_steps" = 2}}\n',
                 tmp_path / "server.log")
    runner = HubRunner(pipeline_config(Settings(inference=dict(task_timeout=120, max_attempts=1))))
    try:
        assert srv.models()["tiny/instruct-pix2pix"]["task"] == "image-text-to-image"
        photo = media_file("chelsea.png")
        image = await stored_upload(sink, photo.data, photo.name, None)
        out = await runner.run("image-text-to-image", "tiny/instruct-pix2pix", {"image": image, "text": "make it red"},
                               sink, task_id=1, url=f"{srv.url}/models/tiny/instruct-pix2pix", expert_server=True)
    finally:
        await runner.aclose()
        srv.stop()
    (edited,) = out.files
    with Image.open(edited.path) as got, Image.open(image.path) as original:
        assert edited.mime == "image/png" and got.size == original.size
    assert edited.description.startswith(f"{image.id} edited as 'make it red'")


# -- on the team's expert server, a tiny Qwen2-Audio -----------------------------------------------

async def test_a_recording_question_runs_on_the_expert_server_with_a_tiny_qwen2_audio(tmp_path, sink):
    """A tiny random Qwen2-Audio (benchmarks/harness/tinymodels.py) whose card says
    ``audio-text-to-text``: the bot's client asks it through ``chat_completion`` (the server's
    ``/v1/chat/completions`` under the model's URL) with a real recording and gets a text answer;
    the server's HTTP API answers in OpenAI's format naming the model, and a file that is not audio
    or a link instead of the file is one sentence naming the field (a link is never fetched)."""
    import base64

    import httpx2

    from benchmarks.harness import tinymodels
    from tests.test_expert_server import Server

    cache = tmp_path / "hf-cache"
    tinymodels.build_cache(cache, {"tiny/qwen2-audio": tinymodels.REPOS["tiny/qwen2-audio"]})
    srv = Server(cache, "", tmp_path / "server.log")
    runner = HubRunner(pipeline_config(Settings(inference=dict(task_timeout=120, max_attempts=1))))
    rec = media_file("speech_weather.wav")
    url = f"{srv.url}/models/tiny/qwen2-audio"
    try:
        assert srv.models()["tiny/qwen2-audio"]["task"] == "audio-text-to-text"
        audio = await stored_upload(sink, rec.data, rec.name, None)
        out = await runner.run("audio-text-to-text", "tiny/qwen2-audio", {"audio": audio, "text": "Who speaks?"}, sink,
                               task_id=1, url=url, expert_server=True)

        def ask(data: str, max_tokens: int = 4) -> httpx2.Response:
            part = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
            body = {"model": url, "max_tokens": max_tokens,
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "Who speaks?"}, part]}]}
            return httpx2.post(f"{url}/v1/chat/completions", json=body, timeout=60)

        good = ask(base64.b64encode(rec.data).decode())
        bad = ask(base64.b64encode(media_file("chelsea.png").data).decode())
        link = ask("https://example.invalid/speech.wav")
    finally:
        await runner.aclose()
        srv.stop()
    assert isinstance(out.text, str) and out.text.strip() and not out.files
    assert good.status_code == 200 and good.json()["model"] == "tiny/qwen2-audio"
    (choice,) = good.json()["choices"]
    assert choice["message"]["role"] == "assistant" and 0 < len(choice["message"]["content"].split()) <= 4
    assert (bad.status_code, bad.json()) == (400, {"error": "Field 'messages.input_audio.data' is not an audio file "
                                                            "this server can read (WAV, FLAC, MP3, OGG, ...)."})
    assert (link.status_code, link.json()) == (400, {"error": "Field 'messages.input_audio.data' must be the file "
                                                              "inline (a data: URI or base64), not a link."})


# -- on the team's expert server, a tiny Qwen2-VL watching a video ---------------------------------

def _clip(fmt: str, frames: int, width: int = 64, height: int = 48) -> bytes:
    """An H.264 video of ``frames`` frames of ``width`` x ``height`` pixels at 10 fps: in MP4 (which declares its frame count)
    or as a raw ``h264`` stream (which declares none: only counting while decoding bounds it)."""
    import io

    import av
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), i * 3, dtype="uint8"), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return buf.getvalue()


async def test_a_video_question_runs_on_the_expert_server_with_a_tiny_qwen2_vl(tmp_path, sink):
    """A tiny random Qwen2-VL whose card says ``video-text-to-text``: the bot's client asks it with
    a real clip (50 frames) and gets a text answer; the HTTP API answers in OpenAI's format naming
    the model; a file that is not a video (a still image), a link, a video over ``max_video_frames``
    (declared by its MP4, or undeclared in a raw stream and counted while decoding) and one whose
    frames are over ``max_image_pixels`` are one sentence each."""
    import base64

    import httpx2

    from benchmarks.harness import tinymodels
    from tests.test_expert_server import Server

    cache = tmp_path / "hf-cache"
    tinymodels.build_cache(cache, {"tiny/qwen2-vl": tinymodels.REPOS["tiny/qwen2-vl"]})
    srv = Server(cache, "max_video_frames = 60\nmax_image_pixels = 200000\n", tmp_path / "server.log")
    runner = HubRunner(pipeline_config(Settings(inference=dict(task_timeout=120, max_attempts=1))))
    clip = media_file("rocket_zoom.mp4")
    url = f"{srv.url}/models/tiny/qwen2-vl"

    def ask(data: bytes | str) -> httpx2.Response:
        uri = data if isinstance(data, str) else "data:video/mp4;base64," + base64.b64encode(data).decode()
        content = [{"type": "text", "text": "What happens?"}, {"type": "video_url", "video_url": {"url": uri}}]
        body = {"model": url, "max_tokens": 3, "messages": [{"role": "user", "content": content}]}
        return httpx2.post(f"{url}/v1/chat/completions", json=body, timeout=60)

    try:
        assert srv.models()["tiny/qwen2-vl"]["task"] == "video-text-to-text"
        video = await stored_upload(sink, clip.data, clip.name, None)
        out = await runner.run("video-text-to-text", "tiny/qwen2-vl", {"video": video, "text": "What happens?"}, sink,
                               task_id=1, url=url, expert_server=True)
        replies = [ask(clip.data), ask(media_file("chelsea.png").data), ask("https://example.invalid/clip.mp4"),
                   ask(_clip("mp4", 80)), ask(_clip("h264", 80)), ask(_clip("h264", 40)), ask(_clip("mp4", 2, 640, 480))]
    finally:
        await runner.aclose()
        srv.stop()
    assert isinstance(out.text, str) and out.text.strip() and not out.files
    good, bad, link, declared, counted, raw, wide = replies
    assert good.status_code == 200 and good.json()["model"] == "tiny/qwen2-vl"
    assert 0 < len(good.json()["choices"][0]["message"]["content"].split()) <= 3
    assert raw.status_code == 200  # a raw stream under the limit is read
    field = "Field 'messages.video_url.url'"
    assert (bad.status_code, bad.json()) == (400, {"error": f"{field} is not a video this server can read (MP4, "
                                                            "WebM, MKV, ...)."})
    assert (link.status_code, link.json()) == (400, {"error": f"{field} must be the file inline (a data: URI or "
                                                              "base64), not a link."})
    for r in (declared, counted):
        assert r.status_code == 413 and r.json()["error"].startswith("Field 'messages.video_url.url' is a video of "
                                                                     "more than 60 frames")
        assert "max_video_frames = 60" in r.json()["error"]
    assert (wide.status_code, wide.json()) == (413, {"error": f"{field} is a video of 640x480 pixels a frame, over "
                                                              "this server's limit (max_image_pixels = 200000)."})


async def test_a_video_is_redrawn_on_the_expert_server_with_a_tiny_video_to_video_pipeline(tmp_path, sink, decoder):
    """A tiny random ModelScope ``VideoToVideoSDPipeline`` without a card (its task read from
    ``model_index.json``): the bot's client sends a real clip and an instruction and stores the MP4
    that comes back, 8 frames at the clip's frames' size scaled to fit ``max_output_pixels``;
    a still image instead of a video is one sentence naming the field."""
    import base64

    import httpx2

    from benchmarks.harness import tinymodels
    from tests.test_expert_server import Server

    cache = tmp_path / "hf-cache"
    tinymodels.build_cache(cache, {"tiny/video-to-video": tinymodels.REPOS["tiny/video-to-video"]})
    config = 'max_output_pixels = 4096\ndefault_parameters = {"video-to-video" = {"num_inference_steps" = 2}}\n'
    srv = Server(cache, config, tmp_path / "server.log")
    runner = HubRunner(pipeline_config(Settings(inference=dict(task_timeout=120, max_attempts=1))))
    url = f"{srv.url}/models/tiny/video-to-video"
    try:
        assert srv.models()["tiny/video-to-video"]["task"] == "video-to-video"
        clip = media_file("rocket_zoom.mp4")
        video = await stored_upload(sink, clip.data, clip.name, None)
        out = await runner.run("video-to-video", "tiny/video-to-video", {"video": video, "text": "as a cartoon"}, sink,
                               task_id=1, url=url, expert_server=True)
        still = httpx2.post(url, json={"inputs": base64.b64encode(media_file("chelsea.png").data).decode()}, timeout=60)
    finally:
        await runner.aclose()
        srv.stop()
    (made,) = out.files
    info = await probe(made.path, decoder)
    (stream,) = [s for s in info["streams"] if s["codec_type"] == "video"]
    # 320x400 frames, kept at 358x448, drawn within max_output_pixels: 57x71, sides cut to multiples of 8
    assert made.mime == "video/mp4" and (stream["width"], stream["height"]) == (56, 64)
    import av

    with av.open(str(made.path)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 8  # the frames kept of the clip, redrawn
    assert made.description == f"{video.id} transformed as 'as a cartoon'"
    assert (still.status_code, still.json()) == (400, {"error": "Field 'inputs' is not a video this server can read "
                                                                "(MP4, WebM, MKV, ...)."})


async def test_an_image_and_a_description_become_a_video_on_the_expert_server_with_a_tiny_ltx_video(tmp_path, sink,
                                                                                                  decoder):
    """A tiny random LTX-Video ``LTXImageToVideoPipeline`` without a card (its task read from
    ``model_index.json``): the bot's client sends a photo and a description in the Hub's
    ``ImageTextToVideoInput`` shape and stores the MP4 that comes back, drawn within
    ``max_output_pixels`` (sides multiples of 32) with the frames the operator's default asks;
    more frames than the server draws is one sentence naming the parameter."""
    import base64

    import av
    import httpx2

    from benchmarks.harness import tinymodels
    from tests.test_expert_server import Server

    cache = tmp_path / "hf-cache"
    tinymodels.build_cache(cache, {"tiny/ltx-image-to-video": tinymodels.REPOS["tiny/ltx-image-to-video"]})
    config = ('max_output_pixels = 4096\ndefault_parameters = {"image-text-to-video" = {"num_inference_steps" = 2, '
              '"num_frames" = 9}}\n')
    srv = Server(cache, config, tmp_path / "server.log")
    runner = HubRunner(pipeline_config(Settings(inference=dict(task_timeout=120, max_attempts=1))))
    url = f"{srv.url}/models/tiny/ltx-image-to-video"
    photo = media_file("chelsea.png")
    try:
        assert srv.models()["tiny/ltx-image-to-video"]["task"] == "image-text-to-video"
        image = await stored_upload(sink, photo.data, photo.name, None)
        out = await runner.run("image-text-to-video", "tiny/ltx-image-to-video", {"image": image, "text": "the cat turns"},
                               sink, task_id=1, url=url, expert_server=True)
        many = httpx2.post(url, json={"inputs": base64.b64encode(photo.data).decode(),
                                      "parameters": {"prompt": "the cat turns", "num_frames": 100000}}, timeout=60)
    finally:
        await runner.aclose()
        srv.stop()
    (made,) = out.files
    info = await probe(made.path, decoder)
    (stream,) = [s for s in info["streams"] if s["codec_type"] == "video"]
    assert made.mime == "video/mp4" and (stream["width"], stream["height"]) == (64, 32)  # 451x300 in 4096 px: 78x52
    with av.open(str(made.path)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 9
    assert made.description == f"video from {image.id}: 'the cat turns'"
    assert (many.status_code, many.json()) == (400, {"error": "Field 'parameters.num_frames' must be between 1 and 257."})
