"""The controller asked through OpenAI's Responses API (``[llm] api = "responses"``): the same
sandbox run as through Chat Completions, every call a ``POST /v1/responses`` in the real format
(streamed semantic events, ``text.format`` for plans), and its failures as one sentence."""

from __future__ import annotations

import pytest

from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from pipeline.errors import ControllerError
from pipeline.llm import Controller, Usage
from sandbox.controller import ControllerStandIn
from tests.conftest import media_file


async def run_once(sandbox, tmp_path, api: str, text: str, *files: str) -> dict:
    overrides = sandbox.overrides(tmp_path / api)
    overrides["llm"]["api"] = api
    service = await Service.create(load_settings(env={}, overrides=overrides))
    try:
        key = ConversationKey("test", "w", "c", api)
        events = [e async for e in service.handle(Message(text, [media_file(f) for f in files], key=key,
                                                          who=Requester("terminal", "u1")))]
    finally:
        await service.close()
    return events[-1].record.to_json()


async def test_a_sandbox_run_through_the_responses_api_gives_the_same_answer(sandbox, tmp_path):
    text = "What objects are in this photo, and how many of each?"
    chat = await run_once(sandbox, tmp_path, "chat", text, "chelsea.png")
    asked = len(sandbox.controller.requests)
    responses = await run_once(sandbox, tmp_path, "responses", text, "chelsea.png")
    calls = sandbox.controller.requests[asked:]
    assert responses["status"] == chat["status"] == "ok"
    assert responses["tasks"] == chat["tasks"] and responses["response"] == chat["response"]
    assert {r.api for r in calls} == {"responses"} and {r.api for r in sandbox.controller.requests[:asked]} == {"chat"}
    plan = next(r for r in calls if r.stage == "task-planning")
    assert plan.body["stream"] is True and plan.body["text"]["format"]["type"] == "json_schema"
    assert plan.body["input"][-1]["role"] == "user" and "messages" not in plan.body
    assert responses["llm_calls"] == chat["llm_calls"]


@pytest.fixture
async def controller():
    async with ControllerStandIn(script=[]) as ctl:
        made = []

        def make() -> Controller:
            c = Controller(model="sandbox-controller", base_url=ctl.base_url, api_key="k", timeout=5, max_retries=0,
                           structured_output="auto", temperature=0, max_reply_bytes=1 << 20, api="responses")
            made.append(c)
            return c

        yield ctl, make
        for c in made:
            await c.aclose()


async def test_streamed_and_whole_answers_and_their_token_counts(controller):
    ctl, make = controller
    c = make()
    ctl.script += [{"content": "a streamed answer in four pieces"}, {"content": "a whole answer"}]
    usage = Usage()
    deltas = [d async for d in c.stream_text([{"role": "user", "content": "hi"}], stage="response-generation",
                                              usage=usage)]
    assert "".join(deltas) == "a streamed answer in four pieces" and len(deltas) > 1
    assert usage.completion_tokens == 8 and usage.prompt_tokens == 1
    whole = await c.complete_text([{"role": "user", "content": "hi"}], stage="response-generation", usage=usage)
    assert whole == "a whole answer" and usage.calls == 2


async def test_a_refused_key_is_one_sentence(controller):
    ctl, make = controller
    ctl.script.append({"status": 401, "message": "Incorrect API key provided."})
    with pytest.raises(ControllerError) as raised:
        [d async for d in make().stream_text([{"role": "user", "content": "hi"}], stage="response-generation",
                                             usage=Usage())]
    assert raised.value.user_message.endswith("refused the API key (HTTP 401): check [llm] api_key or OPENAI_API_KEY.")
