"""Plan approval over the HTTP API (issue 36 item 2): ``/hugginggpt`` answers a plan that waits
with its id, nothing run; ``POST /plans/{id}/run`` runs it (dropping a step drops what needs it),
``/cancel`` discards it; another API key is refused. A real server on 127.0.0.1, a real client."""

from __future__ import annotations

import json

import aiohttp
import pytest

from benchmarks.harness.http_server import KEY, Served, image_message
from bot.approval import CANCELLED, GONE, NOT_YOURS
from bot.settings import PlanningSettings

OTHER = "sk-test-key-two"
THREE = {"content": json.dumps({"tasks": [
    {"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
    {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<GENERATED>-0"}},
    {"task": "image-classification", "id": 2, "dep": [-1], "args": {"image": "image-1"}}]})}


@pytest.fixture
async def served(sandbox, tmp_path):
    s = Served(sandbox, tmp_path / "data", {"api_keys": [KEY, OTHER]})
    s.settings = s.settings.model_copy(update={"planning": PlanningSettings(approve="always")})
    await s.start()
    yield s
    await s.close()


async def post(served, path: str, body: dict | None = None, key: str = KEY) -> tuple[int, dict]:
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http:
        async with http.post(served.url + path, json=body) as r:
            return r.status, await r.json()


async def ask(served, sandbox) -> dict:
    sandbox.controller.script.append(THREE)
    status, body = await post(served, "/hugginggpt", {"messages": [image_message("caption, read aloud, classify", "chelsea.png")]})
    assert status == 200 and body["plan"]["cost"] is None and "cost: unknown" in body["message"]
    assert [t["task"] for t in body["plan"]["tasks"]] == ["image-to-text", "text-to-speech", "image-classification"]
    assert sandbox.inference.records == []
    return body["plan"]


async def test_run_this_plan_without_a_step(served, sandbox):
    plan = await ask(served, sandbox)
    status, body = await post(served, f"/plans/{plan['id']}/run", {"drop": [0]}, key=OTHER)
    assert status == 403 and body["error"]["message"] == NOT_YOURS
    status, body = await post(served, f"/plans/{plan['id']}/run", {"drop": [0]})
    assert status == 200, body
    assert "Dropped as asked: step 0 (image-to-text)" in body["message"] and "needed step 0" in body["message"]
    assert {r.task for r in sandbox.inference.records} == {"image-classification"}
    status, body = await post(served, f"/plans/{plan['id']}/run")
    assert status == 409 and body["error"]["message"] == GONE


async def test_cancel_this_plan(served, sandbox):
    plan = await ask(served, sandbox)
    status, body = await post(served, f"/plans/{plan['id']}/cancel")
    assert status == 200 and body["message"] == CANCELLED
    status, body = await post(served, f"/plans/{plan['id']}/run")
    assert status == 409 and sandbox.inference.records == []


async def test_a_malformed_run_body_is_one_sentence(served, sandbox):
    plan = await ask(served, sandbox)
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
        async with http.post(served.url + f"/plans/{plan['id']}/run", data=b"{not json",
                             headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400 and "drop" in (await r.json())["error"]["message"]
    assert sandbox.inference.records == []


async def test_the_openai_endpoint_says_where_to_approve(served, sandbox):
    sandbox.controller.script.append(THREE)
    status, body = await post(served, "/v1/chat/completions", {"model": "hugginggpt", "messages": [
        image_message("caption, read aloud, classify", "chelsea.png")]})
    assert status == 409 and body["error"]["code"] == "approval_required"
    assert "POST /plans/{id}/run" in body["error"]["message"] and sandbox.inference.records == []
