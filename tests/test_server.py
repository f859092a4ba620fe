"""The HTTP API through the real openai SDK: answers, streams, files, conversations
(``hugginggpt serve`` on the sandbox backends, served by uvicorn on 127.0.0.1)."""

from __future__ import annotations

import io
import re

import aiohttp
import openai
import pytest
from PIL import Image

from benchmarks.harness.http_server import KEY, OTHER_KEY, MEDIA, Served, image_message

LINK = re.compile(r"\]\((?P<url>http://[^)\s]+/v1/files/(?P<id>file-[0-9a-f]+-[a-z]+-\d+)(?:\?exp=(?P<exp>\d+)&sig=(?P<sig>[0-9a-f]+))?)\)")


@pytest.fixture
async def served(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY, OTHER_KEY]}).start()
    yield s
    await s.close()


async def download(served: Served, file_id: str, key: str = KEY) -> tuple[bytes, str]:
    """A file through the SDK's own files API (``GET /v1/files/{id}/content``)."""
    resp = await served.client(key).files.with_raw_response.content(file_id)
    return resp.content, resp.headers["content-type"]


async def test_image_request_answers_with_a_link_to_a_decodable_png(served):
    client = served.client()
    raw = await client.chat.completions.with_raw_response.create(
        model="hugginggpt", messages=[image_message("Detect the objects in this photo", "chelsea.png")])
    conversation = raw.headers["x-hugginggpt-conversation"]
    completion = raw.parse()
    assert completion.object == "chat.completion" and completion.model == "hugginggpt"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert completion.usage.completion_tokens > 0 and completion.usage.total_tokens > completion.usage.prompt_tokens
    [link] = LINK.finditer(choice.message.content)
    assert choice.message.content.count("![image-") == 1  # shown as a Markdown image
    data, ctype = await download(served, link["id"])
    assert ctype == "image/png"
    assert Image.open(io.BytesIO(data)).size == (451, 300)  # chelsea, annotated
    # the link itself works without the key (a chat UI's <img>), thanks to its signature
    async with aiohttp.ClientSession() as http:
        async with http.get(link["url"]) as resp:
            assert resp.status == 200 and resp.content_type == "image/png" and await resp.read() == data
        async with http.get(link["url"][:-4] + "0000") as resp:  # a forged signature
            assert resp.status == 404
    # the turn is stored in the conversation the header named
    conv = await served.service.conversation_id(served.conversation_key(conversation))
    [turn] = await served.service.store.turns(conv)
    assert turn["status"] == "ok"


async def test_streamed_answer_shows_progress_then_the_answer_and_usage(served):
    stream = await served.client().chat.completions.create(
        model="hugginggpt", stream=True, stream_options={"include_usage": True},
        messages=[image_message("Detect the objects in this photo", "rocket.jpg")])
    chunks = [c async for c in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert "object-detection" in reasoning and "done" in reasoning
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    [link] = LINK.finditer(content)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    data, ctype = await download(served, link["id"])
    image = Image.open(io.BytesIO(data))
    assert ctype == Image.MIME[image.format]  # the type the bytes really are
    assert image.size == Image.open(MEDIA / "rocket.jpg").size  # the rocket photo, annotated


async def test_second_turn_refers_to_the_first_turns_picture(served):
    client = served.client(**{"X-HuggingGPT-Conversation": "thread-42"})
    first = await client.chat.completions.create(
        model="hugginggpt", messages=[image_message("Describe this picture", "chelsea.png")])
    assert first.choices[0].message.content
    raw = await client.chat.completions.with_raw_response.create(
        model="hugginggpt", messages=[{"role": "user", "content": "Detect the objects in the first photo"}])
    assert raw.headers["x-hugginggpt-conversation"] == "thread-42"
    [link] = LINK.finditer(raw.parse().choices[0].message.content)
    data, _ = await download(served, link["id"])
    assert Image.open(io.BytesIO(data)).size == (451, 300)  # chelsea from turn 1
    # another conversation has no such photo: the service's sentence, as a 400
    with pytest.raises(openai.BadRequestError) as e:
        await served.client(**{"X-HuggingGPT-Conversation": "other"}).chat.completions.create(
            model="hugginggpt", messages=[{"role": "user", "content": "Detect the objects in image-1"}])
    assert "no image-1 in this conversation" in e.value.message
    # and another API key cannot read the first key's file
    with pytest.raises(openai.NotFoundError):
        await download(served, link["id"], key=OTHER_KEY)


async def test_earlier_messages_are_the_chat_log(served, sandbox):
    await served.client().chat.completions.create(model="hugginggpt", messages=[
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Please remember the word marmalade"},
        {"role": "assistant", "content": "I will remember marmalade."},
        {"role": "user", "content": "Generate an image of a cat on a red sofa"}])
    planning = [r for r in sandbox.controller.requests if r.stage == "task-planning"][-1]
    prompt = planning.body["messages"][-1]["content"]
    assert "marmalade" in prompt and "cat on a red sofa" in prompt


async def test_spoken_request_as_input_audio(served):
    import base64

    audio = base64.b64encode((MEDIA / "speech_weather.wav").read_bytes()).decode()
    completion = await served.client().chat.completions.create(model="hugginggpt", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Transcribe this audio"},
        {"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}}]}])
    reasoning = completion.choices[0].message.model_extra.get("reasoning_content") or ""
    assert "automatic-speech-recognition" in reasoning


async def test_models_health_readiness_and_openapi(served):
    models = await served.client().models.list()
    assert [m.id for m in models.data] == ["hugginggpt"]
    assert (await served.client().models.retrieve("hugginggpt")).id == "hugginggpt"
    async with aiohttp.ClientSession() as http:
        for path, status in (("/healthz", 200), ("/readyz", 200)):
            async with http.get(served.url + path) as resp:
                assert resp.status == status
        async with http.get(served.url + "/openapi.json") as resp:
            doc = await resp.json()
        assert {"/v1/chat/completions", "/v1/models", "/v1/files", "/v1/files/{fid}", "/hugginggpt", "/tasks", "/results"} <= set(doc["paths"])
        body_schema = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "messages" in body_schema["properties"]
