"""Every recorded provider (tests/fixtures/cassettes/providers/ and the fal-ai picture, from ``huggingface_hub``'s own test suite)
through the real ``AsyncInferenceClient`` in :class:`HubRunner` and our normalisers: the client
builds the provider's own URLs (``router.huggingface.co/{provider}/...``, black-forest-labs'
polling, replicate's download) and looks the model's provider mapping up on the Hub; the loopback
transports (tests/standins/loopback.py) send all of it, path kept, to the cassette server.
Expected values are read from the recordings.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import re

import pytest
from PIL import Image

from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.experts.hub import HubRunner
from tests.conftest import stored_upload
from tests.standins.cassettes import CassetteServer, load
from tests.standins.loopback import redirect_hub

TOKEN = "hf_replaySECRETtoken42"


@pytest.fixture
async def replay_provider():
    """``run(cassette, provider, task, args)`` → ``(Output, CassetteServer)``."""
    opened: list[tuple[HubRunner, CassetteServer]] = []

    async def run(name: str, provider: str, task: str, model: str, args: dict, sink, *, moved: dict | None = None):
        server = CassetteServer([name])
        # a recorded path the installed client no longer asks for → the path it asks for now
        server.interactions = [dataclasses.replace(i, path=(moved or {}).get(i.path, i.path)) for i in server.interactions]
        await server.__aenter__()
        with redirect_hub(server.url) as transport:
            hub = HubRunner(pipeline_config(Settings(inference=dict(provider=provider, token=TOKEN, max_attempts=1, task_timeout=60))),
                            transport=transport)
            opened.append((hub, server))
            out = await hub.run(task, model, args, sink, task_id=1)
        return out, server

    yield run
    for hub, server in opened:
        await hub.aclose()
        await server.__aexit__(None, None, None)


def post(name: str):
    return next(i for i in load(name) if i.method == "POST")


def hub_model(name: str) -> str:
    """The model id of the cassette's Hub look-up."""
    it = next(i for i in load(name) if i.path.startswith("/api/models/"))
    return it.path.removeprefix("/api/models/")


async def test_chat_on_a_provider_of_the_client(replay_provider, sink):
    name = "providers/chat_completion_no_stream--together"
    it = post(name)
    question = it.request_json()["messages"][-1]["content"]
    out, server = await replay_provider(name, "together", "conversational", hub_model(name), {"text": question}, sink)
    assert out.text == it.json()["choices"][0]["message"]["content"].strip()
    [sent] = server.posts()
    assert sent.path == it.path == "/together/v1/chat/completions"
    assert json.loads(sent.body)["model"] == it.request_json()["model"]  # the provider's own id, from the mapping


@pytest.mark.parametrize("provider", ["nebius", "sambanova"])
async def test_chat_on_a_provider_the_client_dropped_goes_through_the_router(replay_provider, sink, provider):
    """The way to a provider the installed client has no helper for but the router serves: the
    model is pinned (``model:provider``) on the router's auto route, and the provider's recorded
    answer comes back through it. (Recorded from nebius and sambanova before Hugging Face removed
    them on 2026-07-01; the policy no longer routes to those two, tests/test_provider_churn.py.)"""
    name = f"providers/chat_completion_no_stream--{provider}"
    it = post(name)
    question = it.request_json()["messages"][-1]["content"]
    model = hub_model(name)
    out, server = await replay_provider(name, provider, "conversational", model, {"text": question}, sink,
                                        moved={it.path: "/v1/chat/completions"})
    assert out.text == it.json()["choices"][0]["message"]["content"].strip()
    [sent] = server.posts()
    assert sent.path == "/v1/chat/completions" and json.loads(sent.body)["model"] == f"{model}:{provider}"


@pytest.mark.parametrize("provider", ["replicate", "together", "fal-ai"])
async def test_text_to_image_providers(replay_provider, sink, provider):
    name = f"text_to_image--{provider}" if provider == "fal-ai" else f"providers/text_to_image--{provider}"
    it = post(name)
    body = it.request_json()
    prompt = body.get("prompt") or (body.get("input") or {}).get("prompt")
    out, server = await replay_provider(name, provider, "text-to-image", hub_model(name), {"text": prompt}, sink)
    (image,) = out.files
    with Image.open(image.path) as got:
        size = got.size
    recorded = recorded_picture(name)
    with Image.open(io.BytesIO(recorded)) as rec:
        assert size == rec.size
    assert f"({size[0]}x{size[1]} pixels)" in image.description
    assert server.posts()[0].path == it.path


def recorded_picture(name: str) -> bytes:
    """The picture a text-to-image cassette answered: a downloaded file, else base64 in JSON."""
    interactions = load(name)
    for i in interactions:
        if i.content_type.startswith("image/"):
            return i.body
    for i in reversed(interactions):
        text = i.body.decode("utf-8", "replace")
        m = re.search(r'"(?:b64_json|sample)"\s*:\s*"(?:data:image/\w+;base64,)?([A-Za-z0-9+/=]{200,})"', text)
        if m:
            return base64.b64decode(m.group(1))
    raise AssertionError(f"{name} has no picture")


async def test_fal_ai_speech_recognition(replay_provider, sink):
    name = "providers/automatic_speech_recognition--fal-ai"
    it = post(name)
    audio = base64.b64decode(it.request_json()["audio_url"].split(",", 1)[1])
    clip = await stored_upload(sink, audio, "sample.flac", None)
    out, server = await replay_provider(name, "fal-ai", "automatic-speech-recognition", hub_model(name),
                                        {"audio": clip}, sink)
    assert out.text == it.json()["text"].strip()
    assert server.posts()[0].path == "/fal-ai/fal-ai/whisper"


async def test_black_forest_labs_is_left_to_the_providers_the_client_can_call(sink):
    """The installed client has no black-forest-labs helper: the policy never routes to it (the
    model's other live providers are tried), and its recorded picture, as the client handed it
    over then (a PIL image), still reads through the text-to-image normaliser."""
    from pipeline.experts.base import TaskSaver
    from pipeline.experts.providers import ProviderPolicy
    from pipeline.tasks import TASKS
    from pipeline.tasks.base import Inputs

    name = "providers/text_to_image--black-forest-labs"
    live = ["black-forest-labs", "fal-ai", "replicate"]
    assert ProviderPolicy("auto").order("text-to-image", hub_model(name), live) == ["fal-ai", "replicate"]
    prompt = post(name).request_json()["prompt"]
    with Image.open(io.BytesIO(recorded_picture(name))) as picture:
        size = picture.size
        out = await TASKS["text-to-image"].normalise(picture, Inputs(text={"text": prompt}),
                                                    TaskSaver(sink, "text-to-image", 1, pipeline_config(Settings()).output))
    with Image.open(out.files[0].path) as got:
        assert got.size == size
