"""``POST /v1/responses`` (OpenAI's Responses API) through the real openai SDK's
``client.responses.create``: text and image input, the whole ``response`` object and the
streamed semantic events, generated files as links in the output text, and the same keys,
limits and OpenAI error objects as the chat endpoint (``hugginggpt serve`` on the sandbox
backends, served by uvicorn on 127.0.0.1)."""

from __future__ import annotations

import io
import re

import openai
import pytest
from PIL import Image

from benchmarks.harness.http_server import KEY, MEDIA, Served, data_url

LINK = re.compile(r"\]\((?P<url>http://[^)\s]+/v1/files/(?P<id>file-[0-9a-f]+-[a-z]+-\d+)(?:\?exp=\d+&sig=[0-9a-f]+)?)\)")


@pytest.fixture
async def served(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY], "rate_limit_per_minute": 1000}).start()
    yield s
    await s.close()


def image_input(text: str, photo: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "input_text", "text": text},
                                         {"type": "input_image", "image_url": data_url(photo)}]}]


async def picture(served: Served, file_id: str) -> Image.Image:
    resp = await served.client().files.with_raw_response.content(file_id)
    return Image.open(io.BytesIO(resp.content))


async def test_an_image_request_answers_with_a_response_object_and_a_link_to_the_drawn_photo(served):
    raw = await served.client().responses.with_raw_response.create(
        model="hugginggpt", input=image_input("Detect the objects in this photo", "chelsea.png"))
    response = raw.parse()
    assert response.object == "response" and response.status == "completed" and response.model == "hugginggpt"
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert "object-detection" in response.output[0].summary[0].text
    [link] = LINK.finditer(response.output_text)
    assert response.output_text.count("![image-") == 1
    assert (await picture(served, link["id"])).size == (451, 300)  # chelsea, annotated
    assert response.usage.output_tokens > 0 and response.usage.total_tokens > response.usage.input_tokens
    conv = await served.service.conversation_id(served.conversation_key(raw.headers["x-hugginggpt-conversation"]))
    assert [t["status"] for t in await served.service.store.turns(conv)] == ["ok"]


async def test_a_streamed_response_is_the_semantic_events_in_order(served):
    stream = await served.client().responses.create(
        model="hugginggpt", stream=True, input=image_input("Detect the objects in this photo", "rocket.jpg"))
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds.index("response.reasoning_summary_text.delta") < kinds.index("response.output_text.delta")
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert text == done.output_text == events[-4].text and done.status == "completed"
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert "object-detection" in reasoning and done.output[0].summary[0].text == reasoning
    [link] = LINK.finditer(text)
    assert (await picture(served, link["id"])).size == Image.open(MEDIA / "rocket.jpg").size


async def test_a_text_input_generates_a_picture(served):
    response = await served.client().responses.create(model="hugginggpt", input="Generate an image of a cat")
    [link] = LINK.finditer(response.output_text)
    assert (await picture(served, link["id"])).width > 0


async def test_a_run_that_fails_mid_stream_ends_with_response_failed_and_the_sentence(served, sandbox):
    sandbox.controller.script.append({"status": 500, "message": "boom"})
    stream = await served.client().responses.create(model="hugginggpt", stream=True, input="Generate an image of a cat")
    events = [e async for e in stream]
    assert events[0].type == "response.created" and events[-1].type == "response.failed"
    error = events[-1].response.error
    assert error.code == "controller_error" and error.message.startswith("The controller LLM at 127.0.0.1")
    assert "Traceback" not in error.message and events[-1].response.status == "failed"


@pytest.mark.parametrize("kwargs,status,code,param", [
    ({"model": "gpt-4o", "input": "hi"}, 404, "model_not_found", "model"),
    ({"model": "hugginggpt", "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, 400,
     "invalid_input_item", "input[0].type"),
    ({"model": "hugginggpt", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]},
     400, "invalid_content_part", "input[0].content[0]"),
    ({"model": "hugginggpt", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, 400,
     "invalid_content_part", "input[0].content[0].type"),
])
async def test_refusals_are_openai_error_objects(served, kwargs, status, code, param):
    with pytest.raises(openai.APIStatusError) as e:
        await served.client().responses.create(**kwargs)
    body = e.value.response.json()
    assert e.value.status_code == status and set(body["error"]) == {"message", "type", "param", "code"}
    assert (body["error"]["code"], body["error"]["param"]) == (code, param)


async def test_the_key_and_the_rate_limit_are_the_chat_endpoints(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY], "rate_limit_per_minute": 1}).start()
    try:
        with pytest.raises(openai.AuthenticationError):
            await s.client("sk-wrong").responses.create(model="hugginggpt", input="hi")
        await s.client().responses.create(model="hugginggpt", input="Generate an image of a cat")
        with pytest.raises(openai.RateLimitError) as e:
            await s.client().responses.create(model="hugginggpt", input="Generate an image of a cat")
        assert e.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    finally:
        await s.close()
