"""Plan approval over MCP (issue 36 item 2): a plan that waits is asked of the user through the
client (``elicitation/create``, form mode) when the client declares elicitation; refused in one
sentence when it does not. A real MCP client over streamable HTTP against ``/mcp`` on 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from adapters.mcp.server import NO_ELICITATION
from bot.approval import CANCELLED
from bot.settings import PlanningSettings
from sandbox import Sandbox
from tests.test_mcp_server import KEY, ServedApi

PHOTO = Path(__file__).parent / "fixtures" / "media" / "chelsea.png"
THREE = {"content": json.dumps({"tasks": [
    {"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
    {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<GENERATED>-0"}},
    {"task": "image-classification", "id": 2, "dep": [-1], "args": {"image": "image-1"}}]})}
ARGS = {"request": "caption this, read it aloud and classify it",
        "files": ["data:image/png;base64," + base64.b64encode(PHOTO.read_bytes()).decode()]}


@pytest.fixture
async def api(tmp_path):
    async with Sandbox() as sandbox:
        served = ServedApi(sandbox, tmp_path / "data", {"api_keys": [KEY]})
        served.settings = served.settings.model_copy(update={"planning": PlanningSettings(approve="always")})
        served.sandbox = sandbox
        async with served:
            yield served


@contextlib.asynccontextmanager
async def session(api, answer=None):
    """A client session; ``answer`` (a dict, or ``"decline"``) is what its user fills in the form."""
    asked: list[str] = []

    async def elicit(context, params):
        asked.append(params.message)
        if answer == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=answer)

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
        async with streamable_http_client(api.url + "/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write, elicitation_callback=elicit if answer else None) as s:
                await s.initialize()
                yield s, asked


def text_of(result) -> str:
    return "\n".join(b.text for b in result.content if b.type == "text")


async def test_the_user_approves_without_a_step_in_the_client(api):
    api.sandbox.controller.script.append(THREE)
    async with session(api, {"run": True, "drop": "0"}) as (s, asked):
        result = await s.call_tool("hugginggpt", ARGS)
    assert asked and "cost: unknown" in asked[0] and "text-to-speech" in asked[0]
    assert not result.is_error and "Dropped as asked: step 0 (image-to-text)" in text_of(result)
    assert {r.task for r in api.sandbox.inference.records} == {"image-classification"}


async def refusal(api, answer) -> str:
    """The MCP error (one sentence) a call answers when its plan is not approved."""
    api.sandbox.controller.script.append(THREE)
    async with session(api, answer) as (s, _):
        with pytest.raises(MCPError) as info:
            await s.call_tool("hugginggpt", ARGS)
    return info.value.message


async def test_declined_or_no_elicitation_runs_nothing(api):
    assert await refusal(api, "decline") == CANCELLED
    assert await refusal(api, None) == NO_ELICITATION
    assert api.sandbox.inference.records == []
