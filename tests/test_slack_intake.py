"""Slack HTTP mode refuses what Slack would never send before bolt parses it: an unsigned body, a
timestamp that is not a number, a signed body that does not parse. One log line each, 401/400, no
traceback; a real signed delivery still passes. Its ``/readyz`` asks the service whether the
conversation store answers, and only that (the bot answers without memory when storage runs short)."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.handler import create_bolt_app
from bot.service import Service
from bot.settings import load_settings
from adapters.slack.serve import Replica, serve_http
from benchmarks.harness.slack import SECRET, bot_settings
from benchmarks.harness.slack import make_service
from sandbox.slack_api import signed_headers


@pytest.fixture
async def events_url(slack, tmp_path):
    async with make_service(tmp_path) as service:
        settings = bot_settings(service, bot_token=slack.bot_token, signing_secret=SECRET, mode="http")
        front = create_bolt_app(settings, service, AsyncWebClient(token=slack.bot_token, base_url=slack.api_url))
        replica = Replica(lambda: service.storage_problems(store_only=True), "/slack/events")
        runner = await serve_http(front.app, replica, "127.0.0.1", 0, "/slack/events", SECRET)
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


async def test_readyz_says_whether_the_store_answers_and_nothing_else(slack, sandbox, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    overrides = {**sandbox.overrides(tmp_path / "data"), "server": {"ready_min_free_bytes": 1 << 62}}
    service = await Service.create(load_settings(env={}, overrides=overrides))
    settings = bot_settings(service, bot_token=slack.bot_token, signing_secret=SECRET, mode="http")
    front = create_bolt_app(settings, service, AsyncWebClient(token=slack.bot_token, base_url=slack.api_url))
    replica = Replica(lambda: service.storage_problems(store_only=True), "/slack/events")
    runner = await serve_http(front.app, replica, "127.0.0.1", 0, "/slack/events", SECRET)
    ready = f"http://127.0.0.1:{runner.addresses[0][1]}/readyz"
    try:
        # no disk has 4 EiB free: the HTTP API's readiness says so, a Slack replica keeps taking events
        assert any("MiB free" in p for p in await service.storage_problems())
        async with aiohttp.ClientSession() as http:
            async with http.get(ready) as r:
                assert (r.status, await r.text()) == (200, "ready")
            await service.store.close()  # every lookup fails from now on
            async with http.get(ready) as r:
                text = await r.text()
                assert r.status == 503 and text == "The server's conversation store is unavailable; try again later."
                assert str(tmp_path) not in text
    finally:
        await runner.cleanup()
        await front.bot.close(timeout=1)
        await service.close()
    assert [r for r in caplog.records if r.exc_info] == []


def test_a_storage_sentence_reads_the_failure_not_the_paths_it_names():
    from bot.errors import StorageError
    from bot.readiness import storage_sentence

    closed = StorageError("The conversation database /srv/disk-full/locked-busy/corrupt.sqlite3 is closed.")
    assert storage_sentence(closed) == "The server's conversation store is unavailable; try again later."
    full = StorageError("The conversation database /srv/data/conversations.sqlite3 cannot be written: the disk is full.")
    assert storage_sentence(full) == "The server's storage is full; try again later (the operator has been told)."
