"""The payload shapes of today's tasks in their providers' documented formats
(tests/fixtures/cassettes/documented/, see the README there), replayed through the real
``huggingface_hub`` client in :class:`HubRunner`: what the product sends must be the documented
request (the file's own base64 in place of the placeholder), and the documented answer must
become what the user gets."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.experts.hub import HubRunner
from tests.conftest import media_file, stored_upload
from tests.standins.cassettes import CassetteServer, load
from tests.standins.loopback import redirect_hub

TOKEN = "hf_documentedSECRET"


async def replay(names: list[str], provider: str, task: str, model: str, args: dict, sink):
    """Run ``task`` through :class:`HubRunner` against the cassettes; ``(Output, server)``."""
    async with CassetteServer(names) as server:
        with redirect_hub(server.url) as transport:
            hub = HubRunner(pipeline_config(Settings(inference=dict(provider=provider, token=TOKEN, max_attempts=1,
                                                                    task_timeout=60))), transport=transport)
            try:
                return await hub.run(task, model, args, sink, task_id=1), server
            finally:
                await hub.aclose()


def documented(name: str, placeholder: str, data: bytes) -> tuple[dict, dict]:
    """``(request JSON with the file's base64 in place of the placeholder, answer JSON)``."""
    it = next(i for i in load(name) if i.method == "POST")
    body = it.request_body.decode().replace(placeholder, base64.b64encode(data).decode())
    return json.loads(body), it.json()


@pytest.mark.parametrize("task, name, file, placeholder", [
    ("video-text-to-text", "documented/chat_completion_video--router", "rocket_zoom.mp4", "<the video file, base64>"),
    ("audio-text-to-text", "documented/chat_completion_audio--router", "speech_weather.wav", "<the audio file, base64>"),
])
async def test_a_chat_model_gets_the_documented_media_part_and_its_answer_reaches_the_user(sink, task, name, file,
                                                                                          placeholder):
    f = media_file(file)
    resource = await stored_upload(sink, f.data, f.name, None)
    want, answer = documented(name, placeholder, f.data)
    question = want["messages"][0]["content"][0]["text"]
    out, server = await replay([name], "auto", task, want["model"], {task.split("-")[0]: resource, "text": question}, sink)
    assert out.text == answer["choices"][0]["message"]["content"]
    [sent] = server.posts()
    assert sent.path == "/v1/chat/completions" and sent.json() == want


async def test_an_instruction_edit_speaks_fal_ais_documented_queue_and_stores_its_image(sink):
    name = "documented/image_text_to_image--fal-ai"
    photo = media_file("chelsea.png")
    image = await stored_upload(sink, photo.data, photo.name, None)
    its = load(name)
    submitted = next(i for i in its if i.method == "POST").request_json()
    # the picture fal-ai's CDN served in the recorded text-to-image run (tests/fixtures/cassettes)
    picture = next(i for i in load("text_to_image--fal-ai") if "/files/" in i.path).body
    out, server = await replay([name, "text_to_image--fal-ai"], "fal-ai", "image-text-to-image",
                               "black-forest-labs/FLUX.1-Kontext-dev", {"image": image, "text": submitted["prompt"]}, sink)
    (edited,) = out.files
    with Image.open(edited.path) as got, Image.open(io.BytesIO(picture)) as sent_back:  # the client decodes, we store PNG
        assert edited.mime == "image/png" and got.size == sent_back.size
        assert got.convert("RGB").tobytes() == sent_back.convert("RGB").tobytes()
    assert edited.description.startswith(f"{image.id} edited as 'Make the cat wear a red hat'")
    [sent] = server.posts()
    assert sent.path == "/fal-ai/fal-ai/flux-kontext/dev" and sent.query == {"_subdomain": ["queue"]}
    body = sent.json()
    assert set(body) == set(submitted) and body["prompt"] == submitted["prompt"]
    data_uri = body["image_url"]
    assert body["image_urls"] == [data_uri] and base64.b64decode(data_uri.split(",", 1)[1]) == photo.data
    # submit, one status poll (COMPLETED), the result, then the picture from the CDN
    assert [r.path.rsplit("/", 1)[-1] for r in server.received if r.method == "GET"][-3:] == [
        "status", "0f5c1d7e-5a3b-4d8e-9c1a-2b7f3e4d5c6a", "7EQDw9PT6pMiX2fm7bYOC.png"]
