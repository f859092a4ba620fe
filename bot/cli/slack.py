"""``hugginggpt slack``: run the Slack front end.

    hugginggpt slack [--mode socket|http] [--port N] [--host H] [--api-url URL] [--sandbox]

Socket Mode (default) needs the bot token (``xoxb-``) and an app-level token (``xapp-`` with
``connections:write``) and no public URL. HTTP mode serves the Events API at ``[slack] path``
(default ``/slack/events``) and needs the signing secret; any number of replicas may run behind a
load balancer on one store (deliveries are deduplicated in the database, so an event or its retry
landing on any replica is answered once). HTTP mode also serves:

* ``GET /healthz``: liveness, ``200 ok`` while the process runs;
* ``GET /readyz``: readiness, ``200 ready`` when the conversation store answers and the replica is
  not draining, else ``503`` with a one-line reason (take the replica out of the pool).

Drain on the first SIGTERM/SIGINT: ``/readyz`` turns 503 at once and Events API deliveries get
``503`` (a load balancer retries them on another replica, e.g. nginx ``proxy_next_upstream
http_503 non_idempotent``; Slack itself retries a 503 later), interactions (Stop, feedback
buttons) are still served for the runs in flight, which get ``--grace`` seconds to finish; those
still going are cancelled, stored as interrupted and their thread is told; exit status 0. Socket
Mode closes its connection first (Slack sends new events to the app's other connections), then
drains the same way. A second signal cuts the grace short (runs are cancelled now; exit 130).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from typing import Any

from pipeline.redact import mask_credentials

from ..errors import ConfigError, StorageError
from ..settings import Settings, secret
from .common import INTERRUPTED, add_grace_option, add_sandbox_option

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
    add_sandbox_option(p, "SLACK_BOT_TOKEN, and SLACK_APP_TOKEN or SLACK_SIGNING_SECRET, are")
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


READY_TIMEOUT = 2.0
"""Seconds ``/readyz`` waits for the store's answer before calling the replica not ready."""
ACK_WAIT = 3.0
"""Seconds a drain waits for deliveries being acknowledged (Slack's own acknowledgement limit,
docs.slack.dev/apis/events-api: respond within 3 seconds)."""


class Replica:
    """Readiness and drain state of one HTTP-mode process.

    Args:
        store: the service's conversation store (``Service.store``); probed with a lookup of an
            unknown conversation id, which is ``None`` on a usable store.
        events_path: the Events API path (``[slack] path``), the one that is refused while draining.

    Attributes:
        draining: set by :meth:`start_drain`; ``/readyz`` answers 503 and events 503 from then on.
        refused: how many deliveries got 503 while draining.
    """

    def __init__(self, store: Any, events_path: str) -> None:
        self.store = store
        self.events_path = events_path
        self.draining = False
        self.refused = 0
        self._acking = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_problem: str | None = None

    async def problem(self) -> str | None:
        """Why the replica is not ready (one sentence), or ``None`` when ready. Logs changes only
        (a load balancer probes every few seconds)."""
        if self.draining:
            return "draining: this replica is stopping and takes no new events."
        try:
            await asyncio.wait_for(self.store.find("readyz-probe"), READY_TIMEOUT)
            problem = None
        except StorageError as e:
            problem = f"the conversation store is unusable: {e.user_message}"
        except TimeoutError:
            problem = f"the conversation store did not answer within {READY_TIMEOUT:.0f} s."
        except Exception as e:  # the protocol promises StorageError; never let a probe raise
            problem = f"the conversation store failed ({e.__class__.__name__})."
        if problem != self._last_problem:
            if problem:
                log.warning("not ready: %s", problem)
            else:
                log.info("ready: the conversation store answers")
            self._last_problem = problem
        return problem

    async def readyz(self, _: Any) -> Any:
        """``GET /readyz``: 200 ``ready`` or 503 with the reason."""
        from aiohttp import web

        problem = await self.problem()
        if problem is None:
            return web.Response(text="ready")
        return web.Response(status=503, text=problem)

    async def healthz(self, _: Any) -> Any:
        """``GET /healthz``: 200 ``ok`` while the process runs (draining included)."""
        from aiohttp import web

        return web.Response(text="ok")

    async def middleware(self, request: Any, handler: Any) -> Any:
        """aiohttp middleware: while draining, an Events API delivery (a JSON POST to the events
        path) gets 503 before bolt sees it; interactions (form-encoded ``payload``) still pass, they
        may stop or rate a run in flight here. Counts deliveries being acknowledged."""
        from aiohttp import web

        if request.method != "POST" or request.path != self.events_path:
            return await handler(request)
        if self.draining and request.content_type == "application/json":
            self.refused += 1
            log.info("drain: delivery refused with 503 (Slack retry %s); another replica takes it",
                     request.headers.get("X-Slack-Retry-Num", "0"))
            return web.Response(status=503, text="This replica is stopping; deliver the event to another one.",
                                headers={"Retry-After": "1"})
        self._acking += 1
        self._idle.clear()
        try:
            return await handler(request)
        finally:
            self._acking -= 1
            if not self._acking:
                self._idle.set()

    async def start_drain(self) -> None:
        """Refuse new events from now on, then wait (at most :data:`ACK_WAIT` s) for deliveries
        being acknowledged, and a moment more for the listener bolt starts after each
        acknowledgement to hand its run over (so an acknowledged event is never dropped)."""
        self.draining = True
        log.info("drain: /readyz answers 503 and new events get 503 (the load balancer sends them to other replicas)")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), ACK_WAIT)
        await asyncio.sleep(0.05)


async def serve_http(app: Any, replica: Replica, host: str, port: int, path: str) -> Any:
    """Serve the bolt app's Events API at ``path`` plus ``/healthz`` and ``/readyz`` on
    ``host:port``; returns the started ``aiohttp.web.AppRunner`` (``cleanup()`` stops it).

    Raises:
        ConfigError: the port cannot be opened (in use, not allowed).
    """
    from aiohttp import web

    web_app = app.web_app(path=path)

    @web.middleware
    async def drain_gate(request: web.Request, handler: Any) -> web.StreamResponse:
        return await replica.middleware(request, handler)

    web_app.middlewares.append(drain_gate)
    web_app.router.add_get("/healthz", replica.healthz)
    web_app.router.add_get("/readyz", replica.readyz)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as e:
        await runner.cleanup()
        raise ConfigError(f"I cannot listen on {host}:{port} ({e.strerror or e.__class__.__name__}); "
                          "choose another --port or [slack] port.") from None
    log.info("serving the Slack Events API on http://%s:%d%s (/healthz, /readyz)", host, port, path)
    return runner


async def drain(bot: Any, grace: float, forced: asyncio.Event) -> bool:
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


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Run the Slack bot until SIGINT/SIGTERM (or cancellation), draining on the first signal.

    Returns:
        The exit status: 0 after a drain, 130 when a second signal cut it short.

    Raises:
        ConfigError: a credential is missing or refused, Slack cannot be reached, or the HTTP port
            cannot be opened (exit status 2).
    """
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
    stop, forced = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("%s received again: stopping at once", sig.name)
            forced.set()
        else:
            log.info("%s received: draining (a second signal stops at once)", sig.name)
            stop.set()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)

    handler = None
    runner = None
    cut_short = False
    try:
        if mode == "socket":
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler = AsyncSocketModeHandler(app, app_token=secret(settings.slack.app_token),
                                             logger=logging.getLogger("adapters.slack.socket_mode"))
            await connect_socket_mode(handler)
            log.info("connected to Slack in Socket Mode")
            replica = None
        else:
            replica = Replica(service.store, settings.slack.path)
            runner = await serve_http(app, replica, args.host or settings.slack.host,
                                      settings.slack.port if args.port is None else args.port, settings.slack.path)
        print(f"Slack bot running in {mode} mode; press Ctrl-C to stop.", flush=True)
        await stop.wait()
        if replica is not None:
            await replica.start_drain()
        else:
            with contextlib.suppress(Exception):
                await handler.close_async()  # type: ignore[union-attr]
            handler = None
            log.info("drain: Socket Mode connection closed; Slack sends new events to the app's other connections")
        cut_short = await drain(bot, args.grace, forced)
    finally:
        # Also on cancellation: stop receiving, let runs in flight finish, then close the service.
        if handler is not None:
            with contextlib.suppress(Exception):
                await handler.close_async()
        if runner is not None:
            with contextlib.suppress(Exception):
                await runner.cleanup()
        await asyncio.shield(bot.close(timeout=0 if cut_short else args.grace))
        await asyncio.shield(service.close())
        for sig in installed:
            loop.remove_signal_handler(sig)
    log.info("stopped: connections and the store closed")
    return INTERRUPTED if cut_short else 0
