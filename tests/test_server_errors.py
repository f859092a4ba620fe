"""The HTTP API's refusals: each bad input gives its documented status and an OpenAI error object
(the real openai SDK raises the matching exception), a refused URL is never fetched, and a client
that goes away cancels its run."""

from __future__ import annotations

import asyncio
import base64
import json

import aiohttp
import openai
import pytest

from benchmarks.harness.http_server import KEY, CountingSite, Served, image_message

TEXT = [{"role": "user", "content": "Generate an image of a cat"}]


@pytest.fixture
async def served(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {
        "api_keys": [KEY], "max_body_bytes": 400_000, "rate_limit_per_minute": 1000, "max_concurrent_runs": 2,
        "allowed_url_hosts": ["localhost", "127.0.0.1", "*.example.org"], "url_timeout": 5,
    }).start()
    yield s
    await s.close()


def assert_error_object(err: openai.APIStatusError, status: int, code: str | None = None) -> dict:
    assert err.status_code == status
    body = err.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] and "Traceback" not in body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


async def test_missing_or_wrong_key_is_401(served):
    with pytest.raises(openai.AuthenticationError) as e:
        await served.client("sk-wrong").chat.completions.create(model="hugginggpt", messages=TEXT)
    assert_error_object(e.value, 401, "invalid_api_key")
    async with aiohttp.ClientSession() as http:
        async with http.post(served.url + "/v1/chat/completions", json={"model": "hugginggpt", "messages": TEXT}) as r:
            assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_api_key"
        async with http.get(served.url + "/v1/models") as r:
            assert r.status == 401


async def test_unknown_model_is_404(served):
    with pytest.raises(openai.NotFoundError) as e:
        await served.client().chat.completions.create(model="gpt-4o", messages=TEXT)
    err = assert_error_object(e.value, 404, "model_not_found")
    assert err["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        await served.client().models.retrieve("gpt-4o")


@pytest.mark.parametrize("messages, param", [
    ([{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}], "messages[0].content[0].type"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}],
     "messages[0].content[0].image_url.url"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,rawtext"}}]}],
     "messages[0].content[0].image_url.url"),
    ([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "midi"}}]}],
     "messages[0].content[0].input_audio.format"),
    ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content[0]"),
    ([{"role": "assistant", "content": "hello"}], "messages"),
    ([{"role": "user", "content": ""}], "messages"),
    ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
])
async def test_malformed_messages_are_400_naming_the_field(served, messages, param):
    with pytest.raises(openai.BadRequestError) as e:
        await served.client().chat.completions.create(model="hugginggpt", messages=messages)
    assert assert_error_object(e.value, 400)["param"] == param


async def test_a_file_that_is_not_what_it_claims_is_400(served):
    fake = "data:image/png;base64," + base64.b64encode(b"this is not a picture at all").decode()
    with pytest.raises(openai.BadRequestError) as e:
        await served.client().chat.completions.create(model="hugginggpt", messages=[
            {"role": "user", "content": [{"type": "text", "text": "Describe this"},
                                         {"type": "image_url", "image_url": {"url": fake}}]}])
    assert_error_object(e.value, 400, "invalid_file")


async def test_a_refused_file_gives_its_run_slot_back(served):
    fake = "data:image/png;base64," + base64.b64encode(b"this is not a picture at all").decode()
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": fake}}]}]
    for _ in range(3):  # more than the key's 2 run slots (the file is checked while a slot is reserved)
        with pytest.raises(openai.BadRequestError) as e:
            await served.client().chat.completions.create(model="hugginggpt", messages=messages, stream=True)
        assert_error_object(e.value, 400, "invalid_file")
    for _ in range(100):  # a slot goes back once its reservation ends: a kept one would stay taken
        try:
            answer = await served.client().chat.completions.create(model="hugginggpt", messages=TEXT)
            break
        except openai.RateLimitError:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("the refused requests kept their run slots")
    assert answer.choices[0].message.content


async def test_not_json_is_400_other_types_415_and_oversized_body_is_413(served):
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
        async with http.post(served.url + "/v1/chat/completions", data=b"{not json",
                             headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_json"
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": ctype} if ctype else {}
            async with http.post(served.url + "/v1/chat/completions", data=b'{"model": "hugginggpt"}',
                                 headers=headers, skip_auto_headers=["Content-Type"]) as r:
                assert r.status == 415 and (await r.json())["error"]["code"] == "unsupported_media_type", ctype
    with pytest.raises(openai.APIStatusError) as e:  # rocket and chelsea together exceed the 400 kB limit
        await served.client().chat.completions.create(model="hugginggpt", messages=[
            image_message("Describe this", "rocket.jpg"), image_message("and this", "chelsea.png")])
    assert_error_object(e.value, 413, "request_too_large")


@pytest.mark.parametrize("url, rule", [
    ("http://localhost:{port}/photo.png", "private or local address"),
    ("http://127.0.0.1:{port}/photo.png", "private or local address"),
    ("http://[::1]:{port}/photo.png", "not on this server's list"),
    ("http://169.254.169.254/latest/meta-data", "not on this server's list"),
    ("https://images.example.com/photo.png", "not on this server's list"),
    ("ftp://localhost:{port}/photo.png", "Only data: URLs and http(s) URLs"),
])
async def test_remote_url_refused_by_rule_and_nothing_fetched(served, url, rule):
    async with CountingSite() as site:
        with pytest.raises(openai.BadRequestError) as e:
            await served.client().chat.completions.create(model="hugginggpt", messages=[{"role": "user", "content": [
                {"type": "text", "text": "Describe this"},
                {"type": "image_url", "image_url": {"url": url.format(port=site.port)}}]}])
        err = assert_error_object(e.value, 400)
        assert rule in err["message"] and err["param"] == "messages[0].content[1].image_url.url"
        assert site.hits == 0


async def test_rate_limit_and_concurrency_are_429(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY], "rate_limit_per_minute": 2}).start()
    try:
        for _ in range(2):
            await s.client().chat.completions.create(model="hugginggpt", messages=TEXT)
        with pytest.raises(openai.RateLimitError) as e:
            await s.client().chat.completions.create(model="hugginggpt", messages=TEXT)
        assert_error_object(e.value, 429, "rate_limit_exceeded")
        assert int(e.value.response.headers["retry-after"]) >= 1
    finally:
        await s.close()


async def test_more_concurrent_runs_than_allowed_is_429(served, sandbox):
    sandbox.inference.latency["text-to-image"] = 1.5
    first = [asyncio.create_task(served.client(**{"X-HuggingGPT-Conversation": f"c{i}"}).chat.completions.create(
        model="hugginggpt", messages=TEXT)) for i in range(2)]
    await asyncio.sleep(0.6)
    with pytest.raises(openai.RateLimitError) as e:
        await served.client().chat.completions.create(model="hugginggpt", messages=TEXT)
    assert_error_object(e.value, 429, "concurrency_limit_exceeded")
    done = await asyncio.gather(*first)
    assert all(c.choices[0].message.content for c in done)
    await served.client().chat.completions.create(model="hugginggpt", messages=TEXT)  # slots given back


async def test_unknown_route_is_an_openai_error(served):
    async with aiohttp.ClientSession() as http:
        async with http.get(served.url + "/v1/nothing") as r:
            body = await r.json()
            assert r.status == 404 and set(body["error"]) == {"message", "type", "param", "code"}


async def test_client_that_disconnects_mid_stream_cancels_the_run(served, sandbox):
    sandbox.inference.latency["object-detection"] = 5.0
    body = {"model": "hugginggpt", "stream": True, "messages": [image_message("Detect the objects in this photo", "chelsea.png")]}
    headers = {"Authorization": f"Bearer {KEY}", "X-HuggingGPT-Conversation": "gone-away"}
    seen = ""
    async with aiohttp.ClientSession() as http:
        async with http.post(served.url + "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            async for line in r.content:
                seen += line.decode()
                if "running on" in seen:
                    break
            r.close()  # the user closed the tab
    assert json.loads(seen.split("\n")[0][len("data: "):])["object"] == "chat.completion.chunk"
    turn = await _settled_turn(served, "gone-away")
    assert turn["status"] == "error" and "interrupted" in turn["error"]
    calls = [r for r in sandbox.inference.records if r.task == "object-detection"]
    assert len(calls) <= 1  # not retried or continued after the cancel


async def _settled_turn(served, conversation: str) -> dict:
    """The only stored turn of ``conversation``, once it is no longer running (up to 5 s)."""
    conv = await served.service.conversation_id(served.conversation_key(conversation))
    for _ in range(100):
        [turn] = await served.service.store.turns(conv)
        if turn["status"] != "running":
            break
        await asyncio.sleep(0.05)
    return turn


async def test_client_that_disconnects_while_waiting_cancels_the_run(served, sandbox):
    sandbox.inference.latency["object-detection"] = 5.0
    body = {"model": "hugginggpt", "messages": [image_message("Detect the objects in this photo", "chelsea.png")]}
    headers = {"Authorization": f"Bearer {KEY}", "X-HuggingGPT-Conversation": "gave-up"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as http:
        with pytest.raises(asyncio.TimeoutError):
            async with http.post(served.url + "/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
    turn = await _settled_turn(served, "gave-up")
    assert turn["status"] == "error" and "interrupted" in turn["error"]


async def test_loopback_without_keys_answers_without_a_key(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {}).start()
    try:
        completion = await s.client(None).chat.completions.create(model="hugginggpt", messages=[
            image_message("Detect the objects in this photo", "coffee.png")])
        assert "/v1/files/file-" in completion.choices[0].message.content
        assert "?sig=" not in completion.choices[0].message.content  # nothing secret exists to sign with
    finally:
        await s.close()


async def test_a_stream_the_service_refuses_ends_with_an_error_object(served):
    stream = await served.client(**{"X-HuggingGPT-Conversation": "empty"}).chat.completions.create(
        model="hugginggpt", stream=True, messages=[{"role": "user", "content": "Detect the objects in image-3"}])
    with pytest.raises(openai.APIError) as e:
        async for _ in stream:
            pass
    assert "no image-3 in this conversation" in e.value.message
