"""Plan approval on Discord (issue 36 item 2): the real discord.py client against the stand-in
Discord on 127.0.0.1, the real Service on the sandbox backends (SQLite or PostgreSQL). A plan that
waits is posted with Run / Cancel buttons and a "Run without steps…" string select; presses and
choices are INTERACTION_CREATE events as Discord sends them (type 3 MESSAGE_COMPONENT, component_type
2 or 3 with ``values``); a restart (new service and bot on the same store) keeps them working."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pytest

from adapters.discord.bot_client import HuggingGPTBot
from bot.approval import CANCELLED, EXPIRED, NOT_YOURS
from bot.service import Service
from bot.settings import load_settings
from sandbox import Sandbox
from sandbox.discord_messages import BOT_PERMISSIONS
from sandbox.discord_server import StandinDiscord
from tests.test_discord_bot import Env

MEDIA = Path(__file__).parent / "fixtures" / "media"
THREE = {"content": json.dumps({"tasks": [
    {"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
    {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<GENERATED>-0"}},
    {"task": "image-classification", "id": 2, "dep": [-1], "args": {"image": "image-1"}}]})}


@pytest.fixture(params=["sqlite", "postgres"])
def database(request):
    return request.getfixturevalue("postgres_url") if request.param == "postgres" else None


@contextlib.asynccontextmanager
async def bot_on(d: StandinDiscord, sb: Sandbox, tmp_path: Path, database: str | None):
    overrides = sb.overrides(tmp_path / "data")
    overrides["discord"] = {"token": d.token}
    overrides["planning"] = {"approve": "always"}
    if database:
        overrides["storage"]["database_url"] = database
    settings = load_settings(env={}, overrides=overrides)
    service = await Service.create(settings)
    bot = HuggingGPTBot(service, settings, guild_ready_timeout=0.05)
    runner = None
    try:
        await bot.login(d.token)
        runner = asyncio.create_task(bot.connect(reconnect=True))
        await asyncio.wait_for(bot.wait_until_ready(), 10)
        yield Env(d, bot, service, settings, sb)
    finally:
        await bot.close()
        if runner is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(runner, 5)
        await service.close()


async def waiting_plan(env: Env):
    """Ask; the thread and the bot's message with the plan's buttons."""
    env.sandbox.controller.script.append(THREE)
    iid = await env.ask("caption this, read it aloud and classify it", files=["chelsea.png"])
    thread = await env.thread_of(iid)
    plan = await env.d.wait_for(lambda: next((m for m in env.d.bot_messages(thread) if any(
        b["custom_id"].startswith("hgpt:plan:") for b in m.buttons())), None), 15)
    assert "cost: unknown" in plan.text and "text-to-speech" in plan.text
    return thread, plan


def button(plan, label: str) -> str:
    return next(b["custom_id"] for b in plan.buttons() if b["label"] == label)


async def test_run_after_a_restart_and_a_stranger_is_refused(tmp_path, database):
    async with Sandbox() as sb, StandinDiscord(MEDIA) as d:
        old = d.patch_client_urls()
        try:
            async with bot_on(d, sb, tmp_path, database) as env:
                thread, plan = await waiting_plan(env)
                assert sb.inference.records == []
            async with bot_on(d, sb, tmp_path, database) as env:  # a restart: the old buttons still work
                nosy = await d.press(plan.id, button(plan, "Run"), user=d.user2, permissions=BOT_PERMISSIONS)
                await d.wait_for(lambda: env.ephemeral_reply(nosy), 5)
                assert env.ephemeral_reply(nosy) == NOT_YOURS
                await d.press(plan.id, button(plan, "Run"))
                answer = await d.wait_for(lambda: next((m for m in d.bot_messages(thread)
                                                        if "Sandbox stand-in controller" in m.text), None), 20)
                assert answer and plan.buttons() == []
                assert {r.task for r in sb.inference.records} >= {"image-to-text", "text-to-speech", "image-classification"}
        finally:
            d.restore_client_urls(old)


async def test_cancel_expiry_and_dropping_a_step(tmp_path, database):
    async with Sandbox() as sb, StandinDiscord(MEDIA) as d:
        old = d.patch_client_urls()
        try:
            async with bot_on(d, sb, tmp_path, database) as env:
                _, plan = await waiting_plan(env)
                await d.press(plan.id, button(plan, "Cancel"))
                await d.wait_for(lambda: plan.text == CANCELLED and not plan.buttons(), 5)
                _, plan = await waiting_plan(env)
                env.service.plans.clock = lambda: 4e9  # long after its approval_timeout
                late = await d.press(plan.id, button(plan, "Run"))
                await d.wait_for(lambda: env.ephemeral_reply(late) == EXPIRED and plan.text == EXPIRED, 5)
                assert sb.inference.records == []
                env.service.plans.clock = time.time
                thread, plan = await waiting_plan(env)
            async with bot_on(d, sb, tmp_path, database) as env:  # a restart: the select still works
                [select] = plan.selects()
                assert select["custom_id"] == f"hgpt:plan:without:{select['custom_id'][-16:]}"
                assert [o["value"] for o in select["options"]] == ["0", "1", "2"]
                assert (select["min_values"], select["max_values"]) == (1, 2)  # never every step
                assert [b["label"] for b in plan.buttons()] == ["Run", "Cancel"]
                with pytest.raises(AssertionError, match="outside 1..2"):  # Discord's client allows no more
                    await d.press(plan.id, select["custom_id"], values=["0", "1", "2"])
                nosy = await d.press(plan.id, select["custom_id"], values=["0"], user=d.user2, permissions=BOT_PERMISSIONS)
                await d.wait_for(lambda: env.ephemeral_reply(nosy), 5)
                assert env.ephemeral_reply(nosy) == NOT_YOURS and plan.selects()
                await d.press(plan.id, select["custom_id"], values=["0"])
                answer = await d.wait_for(lambda: next((m for m in d.bot_messages(thread) if "Dropped as asked" in m.text
                                                        and "Sandbox stand-in controller" in m.text), None), 20)
                assert "step 1 (text-to-speech, needed step 0)" in answer.text
                assert {r.task for r in sb.inference.records} == {"image-classification"}
                assert plan.text.startswith("Running this plan without step 0") and not plan.selects()
        finally:
            d.restore_client_urls(old)
