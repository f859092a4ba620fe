"""``hugginggpt slack``: run the Slack front end.

    hugginggpt slack [--mode socket|http] [--port N] [--host H] [--api-url URL] [--sandbox]

Socket Mode (default) needs the bot token (``xoxb-``) and an app-level token (``xapp-`` with
``connections:write``) and no public URL. HTTP mode serves the Events API at ``[slack] path``
(default ``/slack/events``) behind a load balancer and needs the signing secret; ``GET /healthz``
answers 200 for health checks. SIGINT/SIGTERM stop it gracefully: no new work, runs in flight get
up to ``--grace`` seconds to finish, the rest are marked as interrupted in their thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from typing import Any

from pipeline.redact import mask_credentials

from ..errors import ConfigError
from ..settings import Settings, secret
from .common import add_grace_option, add_sandbox_option

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``slack`` subcommand to the CLI's subparsers; returns the new parser."""
    p = subparsers.add_parser("slack", help="run the Slack bot (Socket Mode or HTTP Events API)")
    p.add_argument("--mode", choices=["socket", "http"], default=None, help="default: [slack] mode (socket)")
    p.add_argument("--port", type=int, default=None, help="HTTP mode: port to listen on (default: [slack] port, 3000)")
    p.add_argument("--host", default=None, help="HTTP mode: address to bind (default: [slack] host, 0.0.0.0)")
    p.add_argument("--api-url", default=None,
                   help="Slack Web API base URL (default https://slack.com/api/; GovSlack: https://slack-gov.com/api/)")
    add_grace_option(p)
    add_sandbox_option(p)
    p.set_defaults(handler=main)
    return p


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


async def verify_token(client: Any) -> dict[str, Any]:
    """Call ``auth.test`` once at start so a wrong token fails loudly, not at the first mention.

    Raises:
        ConfigError: Slack refused the token or is unreachable.
    """
    from slack_sdk.errors import SlackApiError

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


async def connect_socket_mode(handler: Any) -> None:
    """Open the Socket Mode connection once (``apps.connections.open``, then the websocket).

    slack_sdk retries a failed connection for ever; at start, the first failure is the answer: a
    refused app token or an unreachable websocket ends the command with one sentence.

    Args:
        handler: bolt's ``AsyncSocketModeHandler`` (its client logs to ``handler.client.logger``).

    Raises:
        ConfigError: Slack refused the app-level token, or the connection failed (exit status 2).
    """
    from slack_sdk.errors import SlackApiError

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


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Run the Slack bot until SIGINT/SIGTERM (or cancellation). Returns the exit status (0).

    Raises:
        ConfigError: a credential is missing or refused, Slack cannot be reached, or the HTTP port
            cannot be opened (exit status 2).
    """
    from aiohttp import web
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.app import create_bolt_app, get_bot

    from ..service import Service

    mode = args.mode or settings.slack.mode
    check_settings(settings, mode)
    client_kw: dict[str, Any] = {"token": secret(settings.slack.bot_token)}
    if getattr(args, "api_url", None):
        client_kw["base_url"] = args.api_url
    client = AsyncWebClient(**client_kw)
    me = await verify_token(client)
    log.info("Slack bot %s (user %s) in workspace %s, %s mode", me.get("user"), me.get("user_id"), me.get("team"), mode)

    service = await Service.create(settings)
    app = create_bolt_app(settings, service, client)
    bot = get_bot(app)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)

    handler = None
    runner = None
    try:
        if mode == "socket":
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(app, app_token=secret(settings.slack.app_token),
                                             logger=logging.getLogger("adapters.slack.socket_mode"))
            await connect_socket_mode(handler)
            log.info("connected to Slack in Socket Mode")
        else:
            web_app = app.web_app(path=settings.slack.path)

            async def healthz(_: web.Request) -> web.Response:
                return web.Response(text="ok")

            web_app.router.add_get("/healthz", healthz)
            runner = web.AppRunner(web_app, access_log=None)
            await runner.setup()
            host = args.host or settings.slack.host
            port = settings.slack.port if args.port is None else args.port
            try:
                await web.TCPSite(runner, host, port).start()
            except OSError as e:
                raise ConfigError(f"I cannot listen on {host}:{port} ({e.strerror or e.__class__.__name__}); "
                                  "choose another --port or [slack] port.") from None
            log.info("serving the Slack Events API on http://%s:%d%s", host, port, settings.slack.path)
        print(f"Slack bot running in {mode} mode; press Ctrl-C to stop.", flush=True)
        await stop.wait()
        log.info("stopping the Slack bot")
    finally:
        # Graceful shutdown: stop receiving, drain runs in flight, then close the service.
        if handler is not None:
            with contextlib.suppress(Exception):
                await handler.close_async()
        if runner is not None:
            with contextlib.suppress(Exception):
                await runner.cleanup()
        await asyncio.shield(bot.close(timeout=args.grace))
        await asyncio.shield(service.close())
        for sig in installed:
            loop.remove_signal_handler(sig)
    return 0
