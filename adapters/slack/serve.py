"""Serving the Slack front end: Socket Mode or HTTP mode, then the drain (the ``hugginggpt slack``
command parses its options and calls :func:`run`).

Socket Mode (default) needs the bot token (``xoxb-``) and an app-level token (``xapp-`` with
``connections:write``) and no public URL. HTTP mode serves the Events API at ``[slack] path``
(default ``/slack/events``) and needs the signing secret; any number of replicas may run behind a
load balancer on one store (deliveries are deduplicated in the database, so an event or its retry
landing on any replica is answered once). HTTP mode also serves ``/healthz`` and ``/readyz``
(:mod:`adapters.slack.health`).

Drain on the first SIGTERM/SIGINT: ``/readyz`` turns 503 at once and Events API deliveries get
``503``, interactions (Stop, feedback buttons) are still served for the runs in flight, which get
``grace`` seconds to finish; those still going are cancelled, stored as interrupted and their
thread is told. Socket Mode closes its connection first (Slack sends new events to the app's other
connections), then drains the same way. A second signal cuts the grace short (runs are cancelled
now).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ConfigError
from bot.settings import Settings, secret
from pipeline.redact import mask_credentials

from ..signals import StopSignals
from .app import SlackApp, create_bolt_app
from .handler import SlackBot
from .health import Replica, serve_http

if TYPE_CHECKING:
    from bot.service import Service

log = logging.getLogger("adapters.slack.serve")


@dataclass(frozen=True)
class ServeOptions:
    """How to serve (the ``hugginggpt slack`` options, settings filled in).

    Attributes:
        mode: ``"socket"`` or ``"http"``.
        host, port: HTTP mode: where to listen.
        grace: seconds runs in flight may finish on shutdown.
    """

    mode: str
    host: str
    port: int
    grace: float


def check_settings(settings: Settings, mode: str) -> None:
    """Check the Slack credentials the mode needs.

    Raises:
        ConfigError: naming the missing setting and where to set it.
    """
    s = settings.slack
    bot = secret(s.bot_token)
    if not bot:
        raise ConfigError("The Slack bot token is missing: set SLACK_BOT_TOKEN (xoxb-...) or [slack] bot_token.")
    if not bot.startswith("xoxb-"):
        raise ConfigError("The Slack bot token must be a bot token starting with xoxb- (OAuth & Permissions page).")
    if mode == "socket":
        app = secret(s.app_token)
        if not app:
            raise ConfigError("Socket Mode needs an app-level token: set SLACK_APP_TOKEN (xapp-..., scope connections:write) "
                              "or [slack] app_token, or use --mode http.")
        if not app.startswith("xapp-"):
            raise ConfigError("The Slack app token must be an app-level token starting with xapp- (Basic Information page).")
    elif not secret(s.signing_secret):
        raise ConfigError("HTTP mode needs the signing secret: set SLACK_SIGNING_SECRET or [slack] signing_secret "
                          "(Basic Information page), or use --mode socket.")


async def verify_token(client: AsyncWebClient) -> dict[str, Any]:
    """Call ``auth.test`` once at start so a wrong token fails loudly, not at the first mention.

    Returns:
        ``auth.test``'s answer (``user``, ``user_id``, ``team``, ...).

    Raises:
        ConfigError: Slack refused the token or is unreachable.
    """
    try:
        resp = await client.auth_test()
    except SlackApiError as e:
        code = e.response.get("error") if isinstance(e.response.data, dict) else "error"
        raise ConfigError(f"Slack refused the bot token ({code}); check SLACK_BOT_TOKEN and that the app is installed.") from None
    except Exception as e:
        raise ConfigError(f"Slack is unreachable ({e.__class__.__name__}); check the network or --api-url.") from None
    return dict(resp.data)


class _FirstFailure(logging.Handler):
    """Catches the first connection failure slack_sdk's Socket Mode client logs (it logs each
    failed attempt with its exception at ERROR level, then retries for ever)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.error: BaseException | None = None
        self.failed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None and self.error is None:
            self.error = record.exc_info[1]
            self.failed.set()


async def connect_socket_mode(handler: AsyncSocketModeHandler) -> None:
    """Open the Socket Mode connection once (``apps.connections.open``, then the websocket).

    slack_sdk retries a failed connection for ever; at start, the first failure is the answer: a
    refused app token or an unreachable websocket ends the command with one sentence.

    Args:
        handler: bolt's ``AsyncSocketModeHandler`` (its client logs to ``handler.client.logger``).

    Raises:
        ConfigError: Slack refused the app-level token, or the connection failed (exit status 2).
    """
    watch = _FirstFailure()
    sdk_log: logging.Logger = handler.client.logger
    sdk_log.addHandler(watch)
    connect = asyncio.create_task(handler.connect_async())
    failed = asyncio.create_task(watch.failed.wait())
    try:
        await asyncio.wait({connect, failed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        failed.cancel()
        sdk_log.removeHandler(watch)
    error = watch.error or (connect.exception() if connect.done() else None)
    if error is None:
        return
    with contextlib.suppress(Exception):
        await handler.close_async()  # the SDK's retry loop ends once its client is closed
    connect.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await connect
    if isinstance(error, SlackApiError):
        code = error.response.get("error") if isinstance(error.response.data, dict) else "error"
        raise ConfigError(f"Slack refused the app-level token ({code}); check SLACK_APP_TOKEN (xapp-..., scope "
                          "connections:write) or [slack] app_token.", f"apps.connections.open: {code}") from None
    raise ConfigError(f"Slack's Socket Mode connection failed ({error.__class__.__name__}); check the network, a proxy "
                      "or firewall, or use --mode http.", mask_credentials(repr(error))) from None


async def drain(bot: SlackBot, grace: float, forced: asyncio.Event) -> bool:
    """Let the runs in flight finish within ``grace`` seconds, then cancel the rest (each tells
    its thread; the service stores the turn as interrupted). ``forced`` set meanwhile (a second
    signal) cancels them at once. Returns whether ``forced`` cut the grace short."""
    running = set(bot.tasks)
    log.info("drain: waiting up to %.0f s for %d runs in flight", grace, len(running))
    closing = asyncio.create_task(bot.close(timeout=grace))
    second = asyncio.create_task(forced.wait())
    try:
        await asyncio.wait({closing, second}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        second.cancel()
    if not closing.done():
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        log.warning("drain: second signal, stopping at once: %d runs in flight are cancelled and stored as interrupted",
                    sum(not t.done() for t in running))
        await bot.close(timeout=0)
        return True
    await closing
    cancelled = sum(t.cancelled() for t in running)
    if cancelled:
        log.warning("drain: grace of %.0f s over: %d of %d runs cancelled and stored as interrupted (threads told)",
                    grace, cancelled, len(running))
    else:
        log.info("drain: all %d runs in flight finished", len(running))
    return False


async def connect(settings: Settings, mode: str, api_url: str | None = None) -> AsyncWebClient:
    """Check the credentials ``mode`` needs and the bot token (``auth.test``), before anything opens.

    Args:
        settings: all settings (``[slack]``).
        mode: ``"socket"`` or ``"http"``.
        api_url: the Slack Web API base URL (``None``: ``https://slack.com/api/``).

    Returns:
        The bot's web client.

    Raises:
        ConfigError: a credential is missing or refused, or Slack cannot be reached.
    """
    check_settings(settings, mode)
    client = AsyncWebClient(token=secret(settings.slack.bot_token), **({"base_url": api_url} if api_url else {}))
    me = await verify_token(client)
    log.info("Slack bot %s (user %s) in workspace %s, %s mode", me.get("user"), me.get("user_id"), me.get("team"), mode)
    return client


async def run(settings: Settings, service: Service, client: AsyncWebClient, options: ServeOptions) -> bool:
    """Serve Slack until SIGINT/SIGTERM (or cancellation), draining on the first signal.

    Args:
        settings: all settings.
        service: the service the requests go to (the caller closes it afterwards).
        client: the web client :func:`connect` returned.
        options: mode, address and grace.

    Returns:
        Whether a second signal cut the drain short (the command exits 130 then, else 0).

    Raises:
        ConfigError: Socket Mode cannot connect, or the HTTP port cannot be opened.
    """
    front = create_bolt_app(settings, service, client)
    signals = StopSignals()
    cut_short = False
    with signals.installed():
        try:
            async with _receiving(front, settings, service, options) as stop_receiving:
                print(f"Slack bot running in {options.mode} mode; press Ctrl-C to stop.", flush=True)
                await signals.stop.wait()
                await stop_receiving()
                cut_short = await drain(front.bot, options.grace, signals.forced)
        finally:
            # Also on cancellation: receiving has stopped; let runs in flight finish.
            await asyncio.shield(front.bot.close(timeout=0 if cut_short else options.grace))
    log.info("stopped: connections closed")
    return cut_short


@contextlib.asynccontextmanager
async def _receiving(front: SlackApp, settings: Settings, service: Service,
                     options: ServeOptions) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Receive events in ``options.mode`` while inside; yields the coroutine function that stops
    taking new events (the first step of a drain). Leaving closes the connection or the server."""
    if options.mode == "socket":
        handler = AsyncSocketModeHandler(front.app, app_token=secret(settings.slack.app_token),
                                         logger=logging.getLogger("adapters.slack.socket_mode"))
        await connect_socket_mode(handler)
        log.info("connected to Slack in Socket Mode")

        async def close_socket() -> None:
            with contextlib.suppress(Exception):
                await handler.close_async()
            log.info("drain: Socket Mode connection closed; Slack sends new events to the app's other connections")

        try:
            yield close_socket
        finally:
            with contextlib.suppress(Exception):
                await handler.close_async()
        return
    replica = Replica(lambda: service.storage_problems(store_only=True), settings.slack.path)
    runner: web.AppRunner = await serve_http(front.app, replica, options.host, options.port, settings.slack.path,
                                             secret(settings.slack.signing_secret))
    try:
        yield replica.start_drain
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()
