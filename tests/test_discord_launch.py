"""Discord start-up helpers of :mod:`adapters.discord.launch`: the URL overrides are set only while
the bot runs, and a failed first connection is one sentence naming what to fix."""

from __future__ import annotations

import discord
import discord.gateway
import discord.http
import pytest

from adapters.discord.launch import REFUSED_INTENT, REFUSED_TOKEN, check_settings, platform_urls, start_failure
from bot.errors import ConfigError
from bot.settings import load_settings


def test_platform_urls_are_overridden_only_inside() -> None:
    before = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    settings = load_settings(env={}, overrides={"discord": {"api_base_url": "http://127.0.0.1:9/api/v10/",
                                                            "gateway_url": "ws://127.0.0.1:9/gw"}})
    with platform_urls(settings):
        assert discord.http.Route.BASE == "http://127.0.0.1:9/api/v10"
        assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == "ws://127.0.0.1:9/gw"
    assert (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == before


def test_start_failures_are_one_sentence() -> None:
    assert start_failure(discord.PrivilegedIntentsRequired(None), "wss://gateway.discord.gg").user_message == REFUSED_INTENT
    refused = start_failure(OSError("Connection refused"), "ws://user:secret@10.0.0.1:1/gw")
    assert "10.0.0.1" in refused.user_message and "secret" not in refused.user_message
    assert "gateway_url" in refused.user_message


def test_a_missing_token_is_said_before_anything_opens() -> None:
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        check_settings(load_settings(env={}, overrides={}))
    assert "Reset Token" in REFUSED_TOKEN
