"""Approval and cost together (issue 36 items 1-3): with prices set, ``[planning] approve = "costly"``
holds a plan whose estimate passes ``approve_above_usd`` and shows that estimate, runs a cheap one at
once, and a plan pressed Run is still reserved against the requester's budget (refused with the
budget's sentence). Real sandbox stand-ins through the service's front door."""

from __future__ import annotations

import json
import re

import pytest

from adapters.slack.web import APPROVE_ACTIONS
from benchmarks.harness.slack import start_harness
from bot.approval import Approve, ApprovalNeeded
from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from pipeline.cost import dollars
from pipeline.types import Done, TaskStarted
from tests.conftest import media_file

KEY = ConversationKey("slack", "T1", "C1", "1700.2")
WHO = Requester("slack", "U1", ("C1",), "T1")
RUN = APPROVE_ACTIONS[0]
THRESHOLD = 0.10
"""``approve_above_usd`` in these tests: between the cheap plan's estimate and the image plan's."""


def plan(task: str, args: dict) -> dict:
    return {"content": json.dumps({"tasks": [{"task": task, "id": 0, "dep": [-1], "args": args}]})}


IMAGE = plan("text-to-image", {"text": "a cat on a red sofa"})
CLASSIFY = plan("image-classification", {"image": "image-1"})


def settings_for(sandbox, tmp_path, database_url: str | None = None, **budgets):
    """The sandbox with prices: its gateway's seconds cheap, a generated image $0.30, the controller's
    tokens at $2 / $8 per million; approval when a plan's estimate passes THRESHOLD."""
    table = tmp_path / "prices.toml"
    table.write_text("[providers.gateway]\nper_second = 0.0001\n"
                     "[providers.gateway.tasks.text-to-image]\nper_image = 0.30\n")
    o = sandbox.overrides(tmp_path / "data")
    o["llm"].update(price_input_per_million=2.0, price_output_per_million=8.0)
    o["inference"].update(selection="top")
    o["prices"] = {"file": str(table)}
    o["planning"] = {"approve": "costly", "approve_above_usd": THRESHOLD}
    if budgets:
        o["budgets"] = budgets
    if database_url is not None:
        o["storage"]["database_url"] = database_url
    return load_settings(env={}, overrides=o)


async def turn(service: Service, sandbox, script: dict, text: str, files=()) -> list:
    sandbox.controller.script.append(script)
    return [e async for e in service.handle(Message(text, list(files), key=KEY, who=WHO))]


async def test_a_costly_plan_waits_showing_its_estimate_and_a_cheap_one_runs_at_once(sandbox, tmp_path):
    service = await Service.create(settings_for(sandbox, tmp_path))
    try:
        events = await turn(service, sandbox, IMAGE, "draw a cat on a red sofa")
        [waiting] = [e for e in events if isinstance(e, ApprovalNeeded)]
        record = events[-1].record
        assert record.status == "awaiting approval" and not any(isinstance(e, TaskStarted) for e in events)
        assert waiting.estimate_usd is not None and waiting.estimate_usd > THRESHOLD
        assert waiting.estimate_usd == record.estimate.usd
        # what the terminal prints and Slack/Discord post: the estimate as budgets and footers write it
        assert f"cost: about {dollars(waiting.estimate_usd)}" in waiting.text().splitlines()
        assert sandbox.inference.records == []
        events = await turn(service, sandbox, CLASSIFY, "classify this photo", [media_file("chelsea.png")])
        record = events[-1].record
        assert not any(isinstance(e, ApprovalNeeded) for e in events)
        assert record.status == "ok" and record.estimate.usd is not None and record.estimate.usd < THRESHOLD
        assert {r.task for r in sandbox.inference.records} == {"image-classification"}
    finally:
        await service.close()


async def test_a_sub_cent_estimate_is_not_shown_as_nothing(sandbox, tmp_path):
    """A plan held by ``approve_tasks`` whose estimate is under a cent still says what it costs."""
    settings = settings_for(sandbox, tmp_path)
    settings = settings.model_copy(update={  # tenth-price controller tokens: the plan costs under a cent
        "planning": settings.planning.model_copy(update={"approve_tasks": ["image-classification"]}),
        "llm": settings.llm.model_copy(update={"price_input_per_million": 0.2, "price_output_per_million": 0.8})})
    service = await Service.create(settings)
    try:
        events = await turn(service, sandbox, CLASSIFY, "classify this photo", [media_file("chelsea.png")])
        [waiting] = [e for e in events if isinstance(e, ApprovalNeeded)]
        assert 0 < waiting.estimate_usd < 0.005
        assert "cost: about $0.00\n" not in waiting.text() + "\n"
        assert f"cost: about {dollars(waiting.estimate_usd)}" in waiting.text()
    finally:
        await service.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_run_pressed_on_a_plan_over_the_budget_is_refused_with_the_budget_sentence(sandbox, tmp_path, backend,
                                                                                         request):
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    settings = settings_for(sandbox, tmp_path, url, per_user_day=0.20)
    service = await Service.create(settings)
    try:
        events = await turn(service, sandbox, IMAGE, "draw a cat on a red sofa")
        [waiting] = [e for e in events if isinstance(e, ApprovalNeeded)]  # approval comes first: nothing reserved
        assert waiting.estimate_usd > 0.20
        pressed = [e async for e in service.handle(Message("", key=None, who=WHO, approve=Approve(waiting.plan_id)))]
        record = pressed[-1].record
        assert isinstance(pressed[-1], Done) and record.status == "error" and record.results == {}
        assert record.error == (f"This plan's estimated cost of {dollars(record.estimate.known_usd)} would pass your "
                                f"daily budget of $0.2000 ($0.0000 spent); it resets at 00:00 UTC.")
        assert sandbox.inference.records == []  # the approved plan never reached an expert
    finally:
        await service.close()


async def test_on_slack_the_plan_shows_its_estimate_and_run_meets_the_budget(slack, sandbox, tmp_path):
    """Through real slack-bolt and the stand-in Slack: the plan's blocks carry the estimate; Run
    pressed on a plan over the requester's daily budget posts the budget's sentence, runs nothing."""
    service = await Service.create(settings_for(sandbox, tmp_path, per_user_day=0.20))
    h = await start_harness(slack, service, tmp_path)
    try:
        sandbox.controller.script.append(IMAGE)
        body, _, ts = h.mention("draw a cat on a red sofa")
        await h.deliver(body)
        plan = await h.slack.wait_for(lambda: next((m for m in h.replies(ts) if any(
            b.get("block_id") == "approval" for b in m.blocks)), None))
        await h.settle()
        shown = json.dumps(plan.blocks)
        [estimate] = [float(x) for x in re.findall(r"cost: about \$(\d+\.\d{4})", shown)]
        assert estimate > THRESHOLD
        actions = next(b for b in plan.blocks if b.get("block_id") == "approval")
        run = next(e for e in actions["elements"] if e["action_id"] == RUN)
        assert await h.click(plan, RUN, run["value"], user="U1") == 200
        said = await h.slack.wait_for(lambda: next((m for m in h.replies(ts) if "budget" in m.text), None))
        await h.settle()
        assert "would pass your daily budget of $0.2000 ($0.0000 spent); it resets at 00:00 UTC." in said.text
        assert sandbox.inference.records == []
    finally:
        await h.close()
        await service.close()
