"""Slack HTTP mode refuses what Slack would never send before bolt parses it: an unsigned body, a
timestamp that is not a number, a signed body that does not parse. One log line each, 401/400, no
traceback; a real signed delivery still passes."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.app import create_bolt_app
from adapters.slack.health import Replica, serve_http
from benchmarks.harness.slack import SECRET, bot_settings
from benchmarks.harness.slack import make_service
from sandbox.slack_api import signed_headers


@pytest.fixture
async def events_url(slack, tmp_path):
    async with make_service(tmp_path) as service:
        settings = bot_settings(service, bot_token=slack.bot_token, signing_secret=SECRET, mode="http")
        front = create_bolt_app(settings, service, AsyncWebClient(token=slack.bot_token, base_url=slack.api_url))
        runner = await serve_http(front.app, Replica(service.store, "/slack/events"), "127.0.0.1", 0, "/slack/events",
                                  SECRET)
        port = runner.addresses[0][1]
        try:
            yield f"http://127.0.0.1:{port}/slack/events"
        finally:
            await runner.cleanup()
            await front.bot.close(timeout=1)


async def test_malformed_deliveries_are_401_or_400_with_one_line(events_url, caplog):
    caplog.set_level(logging.INFO)
    bad_json = "{not json"
    cases = [
        ({"Content-Type": "text/plain"}, b"hello", 401),
        ({"X-Slack-Request-Timestamp": "abc", "X-Slack-Signature": "v0=00", "Content-Type": "application/json"}, b"{}", 401),
        ({**signed_headers(SECRET, bad_json), "Content-Type": "application/json"}, bad_json.encode(), 400),
        ({**signed_headers(SECRET, "payload=%7Bbad"), "Content-Type": "application/x-www-form-urlencoded"},
         b"payload=%7Bbad", 400),
    ]
    async with aiohttp.ClientSession() as http:
        for headers, body, status in cases:
            async with http.post(events_url, data=body, headers=headers) as r:
                assert r.status == status, (headers, body, await r.text())
        challenge = json.dumps({"type": "url_verification", "challenge": "c-123", "token": "t"})
        async with http.post(events_url, data=challenge,
                             headers={**signed_headers(SECRET, challenge), "Content-Type": "application/json"}) as r:
            assert r.status == 200 and "c-123" in await r.text()  # Slack's own request still passes
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    refusals = [r for r in caplog.records if r.getMessage().startswith("refused")]
    assert len(refusals) == len(cases)
