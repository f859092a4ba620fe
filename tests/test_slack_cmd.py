"""``hugginggpt slack``: settings checks, HTTP mode and Socket Mode end to end through
``hugginggpt.slack.main`` and :mod:`adapters.slack.serve` (real Service on sandbox backends, stand-in Slack), graceful stop."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time

import aiohttp
import pytest

from adapters.slack.serve import check_settings
from hugginggpt import slack as slack_cmd
from bot.settings import load_settings
from sandbox import Sandbox
from bot.errors import ConfigError
from sandbox.slack_api import SlackStandIn, sign

SECRET = "cmd-signing-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hugginggpt")
    sub = parser.add_subparsers(dest="command", required=True)
    slack_cmd.add_parser(sub)
    return parser.parse_args(argv)


def test_parser():
    args = parse(["slack", "--mode", "http", "--port", "8080"])
    assert (args.command, args.mode, args.port, args.sandbox) == ("slack", "http", 8080, False)
    assert parse(["slack"]).mode is None


@pytest.mark.parametrize(
    ("slack", "mode", "needle"),
    [
        ({}, "socket", "SLACK_BOT_TOKEN"),
        ({"bot_token": "xoxp-user"}, "socket", "xoxb-"),
        ({"bot_token": "xoxb-1"}, "socket", "SLACK_APP_TOKEN"),
        ({"bot_token": "xoxb-1", "app_token": "xoxb-2"}, "socket", "xapp-"),
        ({"bot_token": "xoxb-1"}, "http", "SLACK_SIGNING_SECRET"),
    ],
)
def test_missing_credentials_named(slack, mode, needle):
    settings = load_settings(env={}, overrides={"slack": slack})
    with pytest.raises(ConfigError) as e:
        check_settings(settings, mode)
    assert needle in e.value.user_message


async def test_refused_token_is_a_config_error(tmp_path):
    async with SlackStandIn() as slack, Sandbox() as sb:
        settings = load_settings(env={}, overrides={**sb.overrides(tmp_path),
                                                    "slack": {"bot_token": "xoxb-wrong", "signing_secret": SECRET}})
        args = parse(["slack", "--mode", "http", "--port", str(free_port()), "--api-url", slack.api_url])
        with pytest.raises(ConfigError) as e:
            await slack_cmd.main(args, settings)
        assert "invalid_auth" in e.value.user_message


async def _answered(slack: SlackStandIn, channel: str, ts: str) -> bool:
    await slack.wait_for(lambda: slack.thread_files(channel, ts), timeout=20)
    return True


async def test_http_mode_end_to_end_and_graceful_stop(tmp_path):
    async with SlackStandIn() as slack, Sandbox() as sb:
        port = free_port()
        settings = load_settings(env={}, overrides={**sb.overrides(tmp_path),
                                                    "slack": {"bot_token": slack.bot_token, "signing_secret": SECRET}})
        args = parse(["slack", "--mode", "http", "--host", "127.0.0.1", "--port", str(port), "--api-url", slack.api_url])
        task = asyncio.create_task(slack_cmd.main(args, settings))
        try:
            async with aiohttp.ClientSession() as http:
                base = f"http://127.0.0.1:{port}"
                for _ in range(100):
                    try:
                        async with http.get(base + "/healthz") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.05)
                msg = slack.add_user_message("C1", f"<@{slack.bot_user_id}> draw a picture of a red fox")
                body = json.dumps(slack.event_body({"type": "app_mention", "user": "U1", "text": msg.text, "ts": msg.ts,
                                                    "channel": "C1"}))
                stamp = str(int(time.time()))
                async with http.post(base + "/slack/events", data=body, headers={
                        "Content-Type": "application/json", "X-Slack-Request-Timestamp": stamp,
                        "X-Slack-Signature": sign(SECRET, stamp, body)}) as r:
                    assert r.status == 200
                assert await _answered(slack, "C1", msg.ts)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        # stopped: the port is closed
        with pytest.raises(aiohttp.ClientConnectionError):
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/healthz"):
                pass


async def test_socket_mode_end_to_end(tmp_path):
    async with SlackStandIn() as slack, Sandbox() as sb:
        settings = load_settings(env={}, overrides={**sb.overrides(tmp_path),
                                                    "slack": {"bot_token": slack.bot_token, "app_token": slack.app_token}})
        args = parse(["slack", "--api-url", slack.api_url])
        task = asyncio.create_task(slack_cmd.main(args, settings))
        try:
            msg = slack.add_user_message("C1", f"<@{slack.bot_user_id}> draw a picture of a lighthouse")
            eid = await slack.socket_send(slack.event_body({"type": "app_mention", "user": "U1", "text": msg.text,
                                                            "ts": msg.ts, "channel": "C1"}))
            await slack.wait_for(lambda: eid in slack.acks, timeout=10)
            assert await _answered(slack, "C1", msg.ts)
            assert any(m == "apps.connections.open" for m, _ in slack.calls)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
