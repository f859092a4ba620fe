"""Plan approval on Slack (issue 36 item 2): real slack-bolt against the stand-in Slack on
127.0.0.1, the service on sandbox backends and SQLite or PostgreSQL. A plan that needs approval
is posted with Run / Cancel / "Run without step"; presses are signed ``block_actions`` payloads as
Slack sends them. Assertions are on what the thread shows."""

from __future__ import annotations

import json

import pytest

from adapters.slack.web import APPROVE_ACTIONS
from benchmarks.harness.slack import CHANNEL, png_file, start_harness
from bot.approval import CANCELLED, EXPIRED, NOT_YOURS
from bot.service import Service
from bot.settings import load_settings

RUN, CANCEL, DROP = APPROVE_ACTIONS
THREE = {"content": json.dumps({"tasks": [
    {"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
    {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<GENERATED>-0"}},
    {"task": "image-classification", "id": 2, "dep": [-1], "args": {"image": "image-1"}}]})}


@pytest.fixture(params=["sqlite", "postgres"])
def settings(sandbox, tmp_path, request):
    overrides = sandbox.overrides(tmp_path / "data")
    overrides.setdefault("inference", {}).update({"selection": "top"})
    overrides["planning"] = {"approve": "always", "approvers": ["U_BOSS"]}
    if request.param == "postgres":
        overrides["storage"]["database_url"] = request.getfixturevalue("postgres_url")
    return load_settings(env={}, overrides=overrides)


async def asked(h, sandbox):
    """A mention whose plan waits: the thread's message with the buttons, and the mention's ts."""
    sandbox.controller.script.append(THREE)
    body, _, ts = h.mention("caption this, read it aloud and classify it", files=[png_file(h.slack)])
    await h.deliver(body)
    plan = await h.slack.wait_for(lambda: next((m for m in h.replies(ts) if any(
        b.get("block_id") == "approval" for b in m.blocks)), None))
    await h.settle()
    assert "cost: unknown" in plan.text and "text-to-speech" in plan.text
    return plan, ts


def value_of(plan, action_id):
    actions = next(b for b in plan.blocks if b.get("block_id") == "approval")
    return next(e for e in actions["elements"] if e["action_id"] == action_id)


async def test_run_after_a_restart_answers_and_a_stranger_is_refused(slack, sandbox, settings, tmp_path):
    service = await Service.create(settings)
    h = await start_harness(slack, service, tmp_path)
    try:
        plan, ts = await asked(h, sandbox)
        assert sandbox.inference.records == []  # nothing ran while it waits
    finally:
        await h.close()
        await service.close()
    service = await Service.create(settings)  # a restart: a new process on the same store
    h = await start_harness(slack, service, tmp_path)
    try:
        run = value_of(plan, RUN)["value"]
        assert await h.click(plan, RUN, run, user="U_STRANGER") == 200
        await h.slack.wait_for(lambda: h.slack.ephemeral)
        assert h.slack.ephemeral[-1]["text"] == NOT_YOURS and h.slack.ephemeral[-1]["user"] == "U_STRANGER"
        assert await h.click(plan, RUN, run, user="U1") == 200
        answer = await h.slack.wait_for(lambda: next((m for m in h.replies(ts) if "Sandbox stand-in controller" in m.text), None))
        await h.settle()
        assert answer and not any(b.get("block_id") == "approval" for b in plan.blocks)  # the buttons are gone
        assert {r.task for r in sandbox.inference.records} >= {"image-to-text", "text-to-speech", "image-classification"}
    finally:
        await h.close()
        await service.close()


async def test_cancel_and_expiry_are_said(slack, sandbox, settings, tmp_path):
    service = await Service.create(settings)
    h = await start_harness(slack, service, tmp_path)
    try:
        plan, _ = await asked(h, sandbox)
        assert await h.click(plan, CANCEL, value_of(plan, CANCEL)["value"], user="U1") == 200
        await h.slack.wait_for(lambda: plan.text == CANCELLED)
        plan, _ = await asked(h, sandbox)
        h.service.plans.clock = lambda: 4e9  # long after its approval_timeout
        assert await h.click(plan, RUN, value_of(plan, RUN)["value"], user="U1") == 200
        await h.slack.wait_for(lambda: h.slack.ephemeral and h.slack.ephemeral[-1]["text"] == EXPIRED)
        await h.slack.wait_for(lambda: plan.text == EXPIRED)
        assert sandbox.inference.records == []
    finally:
        await h.close()
        await service.close()


async def test_running_without_a_step_drops_what_needs_it_and_says_so(slack, sandbox, settings, tmp_path):
    service = await Service.create(settings)
    h = await start_harness(slack, service, tmp_path)
    try:
        plan, ts = await asked(h, sandbox)
        drop = next(o for o in value_of(plan, DROP)["options"] if o["value"].endswith(" 0"))
        assert await h.click(plan, DROP, drop["value"], user="U_BOSS") == 200  # an approver may
        answer = await h.slack.wait_for(lambda: next((m for m in h.replies(ts) if "Dropped as asked" in m.text), None))
        await h.settle()
        assert "step 1 (text-to-speech, needed step 0)" in answer.text
        assert {r.task for r in sandbox.inference.records} == {"image-classification"}
    finally:
        await h.close()
        await service.close()
