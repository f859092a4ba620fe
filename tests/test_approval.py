"""Plan approval (issue 36 item 2) through the service's front door, on SQLite and PostgreSQL:
a plan that needs approval runs nothing and is kept; a Run press (another service on the same
store: a restart in between) runs it; Cancel, a stranger, expiry, a double press; dropping a step
drops what needs it, and the answer says so. Real sandbox stand-ins; assertions on what a user gets."""

from __future__ import annotations

import json

import pytest

from bot.approval import (CANCELLED, EXPIRED, GONE, NOT_YOURS, Approve, ApprovalNeeded, drop_steps,
                          needs_approval)
from bot.errors import InputError, Refused
from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import PlanningSettings, load_settings
from pipeline.types import Done, PlanReady, Task, TaskStarted
from tests.conftest import media_file

KEY = ConversationKey("slack", "T1", "C1", "1700.1")


def plan(*tasks):
    return {"content": json.dumps({"tasks": [{"task": t, "id": i, "dep": d or [-1], "args": a}
                                             for i, (t, a, d) in enumerate(tasks)]})}


THREE = plan(("image-to-text", {"image": "image-1"}, []),
             ("text-to-speech", {"text": "<GENERATED>-0"}, [0]),
             ("image-classification", {"image": "image-1"}, []))


@pytest.fixture(params=["sqlite", "postgres"])
def settings(sandbox, tmp_path, request):
    overrides = sandbox.overrides(tmp_path / "data")
    overrides.setdefault("inference", {}).update({"selection": "top"})
    overrides["planning"] = {"approve": "always", "approval_timeout": 600, "approvers": ["U_BOSS"]}
    if request.param == "postgres":
        overrides["storage"]["database_url"] = request.getfixturevalue("postgres_url")
    return load_settings(env={}, overrides=overrides)


async def events_of(service: Service, message: Message) -> list:
    return [e async for e in service.handle(message)]


async def ask(service: Service, sandbox, script=THREE) -> ApprovalNeeded:
    sandbox.controller.script.append(script)
    events = await events_of(service, Message("caption this photo, read it aloud and classify it",
                                              [media_file("chelsea.png")], key=KEY, who=Requester("slack", "U1")))
    assert not any(isinstance(e, TaskStarted) for e in events)
    [waiting] = [e for e in events if isinstance(e, ApprovalNeeded)]
    assert isinstance(events[-1], Done) and events[-1].record.status == "awaiting approval"
    assert [t.task for t in waiting.tasks] == ["image-to-text", "text-to-speech", "image-classification"]
    assert "cost: unknown" in waiting.text()
    return waiting


async def test_a_plan_waits_runs_nothing_and_runs_after_a_restart(settings, sandbox):
    first = await Service.create(settings)
    try:
        waiting = await ask(first, sandbox)
        assert sandbox.inference.records == []  # nothing ran while the plan waited
    finally:
        await first.close()
    second = await Service.create(settings)  # a restart: the plan is in the store
    try:
        planning_calls = len(sandbox.controller.calls("task-planning"))
        events = await events_of(second, Message("", key=None, who=Requester("slack", "U1"), approve=Approve(waiting.plan_id)))
        record = events[-1].record
        assert record.status == "ok" and record.response
        assert sorted(r.status for r in record.results.values()) == ["ok", "ok", "ok"]
        assert len(sandbox.controller.calls("task-planning")) == planning_calls  # not planned again
        with pytest.raises(InputError) as again:  # a second press finds it gone
            await events_of(second, Message("", who=Requester("slack", "U1"), approve=Approve(waiting.plan_id)))
        assert again.value.user_message == GONE
    finally:
        await second.close()


async def test_dropping_a_step_drops_what_needs_it_and_the_answer_says_so(settings, sandbox):
    service = await Service.create(settings)
    try:
        waiting = await ask(service, sandbox)
        events = await events_of(service, Message("", who=Requester("slack", "U1"), approve=Approve(waiting.plan_id, (0,))))
        ready = next(e for e in events if isinstance(e, PlanReady))
        assert [t.task for t in ready.tasks] == ["image-classification"]
        record = events[-1].record
        assert record.answered and set(record.results) == {2}
        assert "Dropped as asked: step 0 (image-to-text)" in record.response
        assert "step 1 (text-to-speech, needed step 0)" in record.response
    finally:
        await service.close()


async def test_cancel_stranger_approver_and_expiry(settings, sandbox):
    service = await Service.create(settings)
    try:
        waiting = await ask(service, sandbox)
        with pytest.raises(Refused) as stranger:
            await events_of(service, Message("", who=Requester("slack", "U_OTHER"), approve=Approve(waiting.plan_id)))
        assert stranger.value.user_message == NOT_YOURS
        with pytest.raises(Refused):
            await service.cancel_plan(waiting.plan_id, Requester("slack", "U_OTHER"))
        assert await service.cancel_plan(waiting.plan_id, Requester("slack", "U_BOSS")) == CANCELLED  # an approver
        with pytest.raises(InputError) as gone:
            await service.cancel_plan(waiting.plan_id, Requester("slack", "U1"))
        assert gone.value.user_message == GONE
        waiting = await ask(service, sandbox)
        service.plans.clock = lambda: waiting.expires + 1  # the wait is over
        with pytest.raises(InputError) as expired:
            await events_of(service, Message("", who=Requester("slack", "U1"), approve=Approve(waiting.plan_id)))
        assert expired.value.user_message == EXPIRED
        assert sandbox.inference.records == []
    finally:
        await service.close()


def test_needs_approval_by_mode_task_and_estimate():
    video = (Task(0, "text-to-video", (), {"text": "a cat"}),)
    caption = (Task(0, "image-to-text", (), {"image": "image-1"}),)
    assert not needs_approval(video, None, PlanningSettings(approve="never"))
    assert needs_approval(video, 0.0, PlanningSettings(approve="costly"))  # a task that always asks
    assert needs_approval(caption, None, PlanningSettings(approve="costly"))  # unknown is never zero
    assert not needs_approval(caption, 0.01, PlanningSettings(approve="costly", approve_above_usd=0.05))
    assert needs_approval(caption, 0.06, PlanningSettings(approve="costly", approve_above_usd=0.05))
    assert not needs_approval((), None, PlanningSettings(approve="always"))  # a direct answer runs nothing


def test_drop_steps_follows_references_transitively():
    tasks = (Task(0, "image-to-text", (), {"image": "image-1"}), Task(1, "translation", (), {"text": "<resource>-0"}),
             Task(2, "text-to-speech", (1,), {"text": "<resource>-1"}), Task(3, "image-classification", (), {"image": "image-1"}))
    kept, removed = drop_steps(tasks, [0])
    assert [t.id for t in kept] == [3] and removed == {0: 0, 1: 0, 2: 0}


async def test_plans_kept_in_memory_are_bounded():
    """A process without a store (``hugginggpt run``) keeps at most MEMORY_PLANS waiting plans."""
    from bot.approval import MEMORY_PLANS, PendingPlan, PendingPlans

    plans = PendingPlans(None, PlanningSettings(approve="always"))
    task = (Task(0, "text-to-video", (), {"text": "a cat"}),)
    for i in range(MEMORY_PLANS + 50):
        await plans.keep(PendingPlan(f"{i:016x}", task, None, 4e9, "", "a cat"))
    with pytest.raises(InputError) as oldest:  # the oldest went first: without the bound it would be found
        await plans.find(f"{0:016x}", None)
    assert oldest.value.user_message == GONE
    assert (await plans.find(f"{MEMORY_PLANS + 49:016x}", None)).text == "a cat"
