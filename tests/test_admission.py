"""Admission (bot.admission): the access rules and per-user limits every front end shares."""

from __future__ import annotations

from bot.admission import Admission
from bot.incoming import Requester
from bot.settings import load_settings


def settings(**sections):
    return load_settings(env={}, overrides=sections)


def discord(user="1", channels=("10",), guild="1", roles=("100",)):
    return Requester("discord", user, channels, guild, roles)


async def test_discord_allow_lists() -> None:
    a = Admission(settings(discord={"allowed_guilds": [1], "allowed_channels": [10], "allowed_roles": [100]}), "discord")
    assert a.access(discord()) is None
    assert a.access(discord(channels=("55", "10"))) is None  # a thread in an allowed parent channel
    assert a.access(discord(guild="2")).reason == "guild"
    assert "not enabled on this server" in a.access(discord(guild="2")).sentence
    assert a.access(discord(channels=("11",))).reason == "channel"
    assert a.access(discord(roles=())).reason == "role"
    assert a.access(discord(guild=None)).reason == "dm"
    assert Admission(settings(), "discord").access(discord(guild="5", channels=("6",), roles=())) is None


async def test_slack_allow_lists() -> None:
    a = Admission(settings(slack={"allowed_channels": ["C1"], "allowed_users": ["U1"]}), "slack")
    assert a.access(Requester("slack", "U1", ("C1",), "T1")) is None
    refusal = a.access(Requester("slack", "U1", ("C2",), "T1"))
    assert refusal.reason == "channel" and "not enabled in this channel" in refusal.sentence
    assert a.access(Requester("slack", "U1", ("D9",), "T1", is_dm=True)).reason == "dm"  # DMs follow allowed_channels
    assert "not on the list" in a.access(Requester("slack", "U2", ("C1",), "T1")).sentence


async def test_concurrency_slot_is_reserved_at_once_and_given_back() -> None:
    a = Admission(settings(discord={"max_concurrent_runs": 1, "rate_limit_per_minute": 100}), "discord")
    who = discord()
    assert await a.admit(who) is None
    refusal = await a.admit(who)
    assert refusal.reason == "concurrency" and refusal.sentence == "You already have 1 request running; please wait for one to finish."
    assert await a.admit(discord(user="2")) is None  # per user
    a.release(who)
    assert await a.admit(who) is None


async def test_rate_limit_sentence_names_the_limit() -> None:
    a = Admission(settings(slack={"rate_limit_per_minute": 1}), "slack")
    who = Requester("slack", "U1", ("C1",), "T1")
    assert await a.admit(who) is None
    refusal = await a.admit(who)
    assert refusal.reason == "rate" and "faster than 1 per minute" in refusal.sentence
    a.release(who)  # no concurrency limit on Slack: nothing was reserved, nothing breaks
