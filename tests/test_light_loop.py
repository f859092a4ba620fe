"""What a request costs the event loop (issue 35, "a light loop"): the controller client sends the
messages as they are without the SDK's per-field transform, and a finished stream's connection
goes back to the pool, so that a conversation's calls reuse one TCP connection."""

from __future__ import annotations

import pytest

from sandbox.faulty_controller import FaultyController

MESSAGES = [
    {"role": "system", "content": "You plan tasks. Ünïcode stays as it is: 猫."},
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": '{"tasks": []}'},
    {"role": "user", "content": "what is in image-1?"},
]


@pytest.fixture
def controller():
    c = FaultyController().start()
    yield c
    c.close()


def _controller(url: str):
    from bot.backends import build_controller
    from bot.settings import Settings

    return build_controller(Settings(llm=dict(model="m", base_url=url, api_key="sk-test-0000", max_retries=0)))


async def test_every_call_sends_the_messages_and_settings_unchanged(controller):
    from pipeline.llm import Usage

    controller.chunks = 3
    llm = _controller(controller.url)
    try:
        streamed = "".join([d async for d in llm.stream_text(MESSAGES, stage="response-generation", usage=Usage())])
        whole = await llm.complete_text(MESSAGES, stage="response-generation", usage=Usage())
        planned = "".join([d async for d in llm.stream_json(MESSAGES, stage="task-planning", schema_name="plan",
                                                            schema={"type": "object"}, usage=Usage())])
    finally:
        await llm.aclose()
    assert streamed == whole == controller.answer and planned == controller.plan
    bodies = [r["body"] for r in controller.requests]
    assert [b["messages"] for b in bodies] == [MESSAGES] * 3
    assert all(b["model"] == "m" and "temperature" in b for b in bodies)
    assert [b.get("stream", False) for b in bodies] == [True, False, True]


async def test_calls_one_after_another_reuse_one_connection(controller):
    from pipeline.llm import Usage

    controller.chunks = 5
    llm = _controller(controller.url)
    try:
        for _ in range(4):
            text = "".join([d async for d in llm.stream_text(MESSAGES, stage="response-generation", usage=Usage())])
            assert text == controller.answer
    finally:
        await llm.aclose()
    peers = {r["peer"] for r in controller.requests}
    assert len(controller.requests) == 4 and len(peers) == 1, peers


async def test_a_slack_answer_reuses_connections_to_the_web_api(slack, tmp_path):
    from benchmarks.harness.slack import make_service, start_harness

    async with make_service(tmp_path) as service:
        h = await start_harness(slack, service, tmp_path)
        try:
            body, _, ts = h.mention("draw a picture of a red fox")
            assert (await h.deliver(body))[0] == 200
            await h.settle()
            (reply,) = h.replies(ts)
            assert reply.text.strip()
        finally:
            await h.close()
    calls = len(slack.peers)
    # each call opened its own connection before (a new aiohttp session per call)
    assert calls >= 5 and len(set(slack.peers)) <= calls // 2, (calls, len(set(slack.peers)))
