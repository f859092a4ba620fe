"""Harness for the Slack front end: the real ``bot.service.Service`` on the sandbox stand-in
backends (:func:`make_service`), and the bot's bolt app served over HTTP on 127.0.0.1 (like behind
a load balancer) next to the stand-in Slack (:func:`start_harness`); used by the Slack tests and by
benchmarks/bench_slack.py and bench_live.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import AsyncIterator

import aiohttp
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.handler import SlackApp, create_bolt_app
from bot.service import Service
from bot.settings import Settings, SlackSettings, load_settings
from sandbox import Sandbox
from benchmarks.harness.realparts import free_port
from sandbox.slack_api import SlackStandIn, signed_headers
from sandbox import serve_loopback

SECRET = "test-signing-secret"
MEDIA = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "media"
SERVICE_KIND = "real bot.service.Service on sandbox stand-in backends"
CHANNEL = "C0GENERAL"


@contextlib.asynccontextmanager
async def make_service(tmp_path: Path, *, controller_down: bool = False,
                       latency: dict[str, float] | None = None) -> AsyncIterator[Service]:
    """A started Service on sandbox backends, data under ``tmp_path / "service-data"``.

    Args:
        controller_down: point the controller at a closed port (the backend is down).
        latency: seconds added per model id or task name by the inference stand-in.
    """
    async with Sandbox(latency=latency) as sb:
        overrides = sb.overrides(tmp_path / "service-data")
        if controller_down:
            overrides["llm"]["base_url"] = f"http://127.0.0.1:{free_port()}/v1"
        svc = await Service.create(load_settings(env={}, overrides=overrides))
        try:
            yield svc
        finally:
            await svc.close()


class Harness:
    """The bot served over HTTP like behind a load balancer, plus the stand-in Slack."""

    def __init__(self, slack: SlackStandIn, front: SlackApp, runner: web.AppRunner, port: int, service) -> None:
        self.slack = slack
        self.app = front.app
        self.bot = front.bot
        self.runner = runner
        self.url = f"http://127.0.0.1:{port}/slack/events"
        self.service = service
        self.session = aiohttp.ClientSession()

    async def deliver(self, body: dict, *, retry_num: int | None = None, secret: str = SECRET) -> tuple[int, float]:
        """POST a signed Events API body; return (HTTP status, seconds until the response)."""
        raw = json.dumps(body)
        headers = signed_headers(secret, raw, retry_num)
        t0 = time.perf_counter()
        async with self.session.post(self.url, data=raw, headers=headers) as resp:
            await resp.read()
            return resp.status, time.perf_counter() - t0

    async def click(self, message, action_id: str, value: str, *, user: str = "U1") -> int:
        """A user presses a button of ``message`` (a ``block_actions`` interaction payload, form
        encoded and signed as Slack sends it); returns the HTTP status of the acknowledgement."""
        from urllib.parse import urlencode

        payload = {
            "type": "block_actions", "team": {"id": self.slack.team_id}, "user": {"id": user, "team_id": self.slack.team_id},
            "api_app_id": "A0APP", "token": "legacy-verification-token", "trigger_id": "1.2.3",
            "container": {"type": "message", "message_ts": message.ts, "channel_id": message.channel, "is_ephemeral": False},
            "channel": {"id": message.channel}, "message": {"ts": message.ts, "text": message.text},
            "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": value,
                         "action_ts": str(time.time())}],
        }
        raw = urlencode({"payload": json.dumps(payload)})
        headers = signed_headers(SECRET, raw)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        async with self.session.post(self.url, data=raw, headers=headers) as resp:
            await resp.read()
            return resp.status

    def mention(self, text: str, *, channel: str = CHANNEL, user: str = "U1", thread_ts: str | None = None,
                files: list[dict] | None = None, channel_type: str = "channel") -> tuple[dict, dict, str]:
        """A user's mention as Slack stores it, and its two events (app_mention, message)."""
        msg = self.slack.add_user_message(channel, f"<@{self.slack.bot_user_id}> {text}", user=user,
                                          thread_ts=thread_ts, files=files)
        common = {"user": user, "text": msg.text, "ts": msg.ts, "channel": channel, "team": self.slack.team_id,
                  "event_ts": msg.ts}
        if thread_ts:
            common["thread_ts"] = thread_ts
        if files:
            common["files"] = files
        app_mention = self.slack.event_body({"type": "app_mention", **common})
        message = self.slack.event_body({"type": "message", "channel_type": channel_type,
                                         **({"subtype": "file_share"} if files else {}), **common})
        return app_mention, message, msg.ts

    def user_message(self, text: str, *, thread_ts: str | None = None, channel: str = CHANNEL, user: str = "U1",
                     channel_type: str = "channel", files: list[dict] | None = None) -> tuple[dict, str]:
        msg = self.slack.add_user_message(channel, text, user=user, thread_ts=thread_ts, files=files)
        ev = {"type": "message", "channel_type": channel_type, "user": user, "text": text, "ts": msg.ts,
              "channel": channel, "team": self.slack.team_id, "event_ts": msg.ts}
        if thread_ts:
            ev["thread_ts"] = thread_ts
        if files:
            ev["files"] = files
            ev["subtype"] = "file_share"
        return self.slack.event_body(ev), msg.ts

    async def settle(self, timeout: float = 20.0) -> None:
        """Wait until every run the bot started is over."""
        deadline = time.monotonic() + timeout
        while self.bot.tasks:
            assert time.monotonic() < deadline, "runs did not finish"
            await asyncio.wait(set(self.bot.tasks), timeout=deadline - time.monotonic())

    def replies(self, thread_ts: str, channel: str = CHANNEL) -> list:
        return [m for m in self.slack.thread(channel, thread_ts) if m.user == self.slack.bot_user_id]

    async def close(self) -> None:
        await self.bot.close(timeout=5)
        await self.session.close()
        await self.runner.cleanup()


def bot_settings(service, **slack: object) -> Settings:
    """The service's settings with the ``[slack]`` section replaced (validated)."""
    return service.settings.model_copy(update={"slack": SlackSettings(**slack)})


async def start_harness(slack: SlackStandIn, service, tmp_path: Path, **slack_settings) -> Harness:
    settings = bot_settings(service, bot_token=slack.bot_token, signing_secret=SECRET, mode="http", **slack_settings)
    if isinstance(service, Service):  # it admits Slack's requesters by its settings: these, same pipeline and store
        service = Service(settings, service.pipeline, service.media, service.store, closers=(), events=service.events)
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    front = create_bolt_app(settings, service, client, update_interval=0.05)
    runner, port = await serve_loopback(front.app.web_app(path="/slack/events"))
    return Harness(slack, front, runner, port, service)


def png_file(slack: SlackStandIn, name: str = "chelsea.png", **kw) -> dict:
    """A real photo from tests/fixtures/media, uploaded by a user to the stand-in Slack (its file object)."""
    return slack.add_file((MEDIA / name).read_bytes(), name, "image/png", **kw)
