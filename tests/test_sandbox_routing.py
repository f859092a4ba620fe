"""The product routes its controller calls with headers, not prompt markers: a real pipeline run
through ``bot.service.Service`` on the sandbox, checked from what the stand-in controller received."""

from __future__ import annotations

import pytest

from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from pipeline.types import Done
from tests.conftest import media_file

# The block each stage's user message must carry (the stage's input, paper §3).
BLOCK_OF_STAGE = {
    "task-planning": "<available_tasks>",
    "model-selection": "<candidates>",
    "controller-task": "<input>",
    "response-generation": "<results>",
}


def _texts(body: dict) -> list[str]:
    """Every piece of text in the messages of a chat completions body."""
    out = []
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return out


@pytest.fixture
async def service(sandbox, tmp_path):
    s = await Service.create(load_settings(env={}, overrides=sandbox.overrides(tmp_path / "data")))
    yield s
    await s.close()


async def _turn(service, text, files=()):
    events = [e async for e in service.handle(Message(text, list(files), key=ConversationKey("test", "w", "c", "t1"), who=Requester("terminal", "u1")))]
    assert isinstance(events[-1], Done)
    return events[-1].record


async def test_every_controller_call_names_its_stage_in_a_header(service, sandbox):
    first = await _turn(
        service, "Translate 'Bonjour tout le monde' into English, then generate an image of a cat on a red sofa"
    )
    assert first.status == "ok" and [t.task for t in first.tasks] == ["translation", "text-to-image"]
    second = await _turn(service, "Describe this picture in as much detail as you can", [media_file("chelsea.png")])
    assert second.status == "ok"
    assert [t.task for t in second.tasks] == ["image-to-text", "object-detection", "image-classification"]

    calls = sandbox.controller.requests
    assert {c.stage for c in calls} == set(BLOCK_OF_STAGE)  # all four stages were exercised
    for call in calls:
        assert call.stage in BLOCK_OF_STAGE, call.stage
        user = _texts(call.body)[-1]
        assert BLOCK_OF_STAGE[call.stage] in user, (call.stage, user[:200])
        # the pipeline tag of a controller-served task travels only on controller-task calls
        assert (call.task is not None) == (call.stage == "controller-task"), (call.stage, call.task)
        for text in _texts(call.body):
            assert "[stage:" not in text and not text.lstrip().startswith("task:"), text[:200]
    [served] = [c for c in calls if c.stage == "controller-task"]
    assert served.task == "translation" and "Bonjour tout le monde" in _texts(served.body)[-1]
    # each turn is planned first and answered last
    stages = [c.stage for c in calls]
    assert stages[0] == "task-planning" and stages[-1] == "response-generation"
    assert stages.count("task-planning") == stages.count("response-generation") == 2
