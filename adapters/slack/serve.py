"""How Slack reaches us: Socket Mode or HTTP mode, the checks a delivery passes before bolt sees
it, the health endpoints, then the drain (the ``hugginggpt slack`` command parses its options and
calls :func:`run`).

Socket Mode (default) needs the bot token (``xoxb-``) and an app-level token (``xapp-`` with
``connections:write``) and no public URL. HTTP mode serves the Events API at ``[slack] path``
(default ``/slack/events``) and needs the signing secret; any number of replicas may run behind a
load balancer on one store (deliveries are deduplicated in the database, so an event or its retry
landing on any replica is answered once).

Before bolt sees an HTTP-mode delivery (bolt parses a body before it checks the signature, so an
unsigned body that is not JSON would end as a 500 with a traceback), in this order, each refusal
one log line and a plain-text answer: ``X-Slack-Request-Timestamp`` is digits and
``X-Slack-Signature`` is the HMAC of the body under the signing secret, within five minutes
(slack_sdk's ``SignatureVerifier``, Slack's "Verifying requests from Slack"), else 401; the body is
what Slack sends (JSON for the Events API, form-encoded with a JSON ``payload`` for interactions,
a slash command's fields), else 400.

HTTP mode also serves ``GET /healthz`` (liveness: ``200 ok`` while the process runs),
``GET /readyz`` (``200 ready`` when the conversation store answers and the replica is not
draining, else ``503`` with a one-line reason: take the replica out of the pool) and
``GET /metrics`` (Prometheus, :mod:`bot.metrics`); Socket Mode serves ``/metrics`` on
``[telemetry] metrics_port`` when it is set.

Drain on the first SIGTERM/SIGINT: ``/readyz`` turns 503 at once and Events API deliveries get
``503`` (a load balancer retries them on another replica, e.g. nginx ``proxy_next_upstream
http_503 non_idempotent``; Slack itself retries a 503 later); interactions (Stop, feedback buttons)
are still served for the runs in flight, which get ``grace`` seconds to finish; those still going
are cancelled, stored as interrupted and their thread is told. Socket Mode closes its connection
first (Slack sends new events to the app's other connections), then drains the same way. A second
signal cuts the grace short (runs are cancelled now).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING
from urllib.parse import parse_qs

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ConfigError
from bot.metrics import exposition, metrics_port
from bot.settings import Settings, secret
from pipeline.redact import mask_credentials

from ..signals import StopSignals
from .handler import SlackApp, SlackBot, create_bolt_app

if TYPE_CHECKING:
    from bot.service import Service


log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def body_problem(body: bytes, content_type: str) -> str | None:
    """Why ``body`` is not a Slack delivery (one phrase), or ``None``."""
    try:
        text = body.decode("utf-8")
        if content_type == "application/json":
            if not isinstance(json.loads(text), dict):
                return "the JSON body is not an object"
        elif content_type == "application/x-www-form-urlencoded":
            payload = parse_qs(text).get("payload")
            if payload and not isinstance(json.loads(payload[0]), dict):
                return "the form's payload is not a JSON object"
        else:
            return f"the content type {content_type or 'none'} is not one Slack sends"
    except (UnicodeDecodeError, ValueError) as e:
        return f"the body does not parse ({e.__class__.__name__})"
    return None


def intake(signing_secret: str, path: str) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """An aiohttp middleware checking POSTs to ``path`` (the Events API path) as the module says.

    Args:
        signing_secret: the app's signing secret (``[slack] signing_secret``).
        path: the Events API path (``[slack] path``).
    """
    verifier = SignatureVerifier(signing_secret)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST" or request.path != path:
            return await handler(request)
        body = await request.read()
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature")
        if not timestamp.isdigit() or not verifier.is_valid(body, timestamp, signature):
            log.info("refused an unsigned or badly signed request from %s (timestamp %r, %d bytes)",
                     request.remote, timestamp[:20], len(body))
            return web.Response(status=401, text="The request is not signed by Slack.")
        if (problem := body_problem(body, request.content_type)) is not None:
            log.info("refused a signed request from %s: %s", request.remote, problem)
            return web.Response(status=400, text="The request body is not a Slack delivery.")
        return await handler(request)

    return check



Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


StorageProbe = Callable[[], Awaitable[list[str]]]
"""What keeps the storage from taking work, one sentence each, empty when ready
(``Service.storage_problems`` with ``store_only=True``: whether the conversation store answers)."""

ACK_WAIT = 3.0
"""Seconds a drain waits for deliveries being acknowledged (Slack's own acknowledgement limit,
docs.slack.dev/apis/events-api: respond within 3 seconds)."""


class Replica:
    """Readiness and drain state of one HTTP-mode process.

    Args:
        probe: what keeps the storage from taking work (:data:`StorageProbe`; the service's
            readiness, the same as the HTTP API's, :meth:`bot.service.Service.storage_problems`).
        events_path: the Events API path (``[slack] path``), the one that is refused while draining.

    Attributes:
        draining: set by :meth:`start_drain`; ``/readyz`` answers 503 and events 503 from then on.
        refused: how many deliveries got 503 while draining.
    """

    def __init__(self, probe: StorageProbe, events_path: str) -> None:
        self.probe = probe
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
            problem = " ".join(await self.probe()) or None
        except Exception as e:  # the probe reports storage failures as sentences; never let one raise
            problem = f"The conversation store failed ({e.__class__.__name__})."
        if problem != self._last_problem:
            if problem:
                log.warning("not ready: %s", problem)
            else:
                log.info("ready: the conversation store answers")
            self._last_problem = problem
        return problem

    async def readyz(self, _: web.Request) -> web.Response:
        """``GET /readyz``: 200 ``ready`` or 503 with the reason."""
        problem = await self.problem()
        if problem is None:
            return web.Response(text="ready")
        return web.Response(status=503, text=problem)

    async def healthz(self, _: web.Request) -> web.Response:
        """``GET /healthz``: 200 ``ok`` while the process runs (draining included)."""
        return web.Response(text="ok")

    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """aiohttp middleware: while draining, an Events API delivery (a JSON POST to the events
        path) gets 503 before bolt sees it; interactions (form-encoded ``payload``) still pass, they
        may stop or rate a run in flight here. Counts deliveries being acknowledged."""
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


async def serve_http(app: AsyncApp, replica: Replica, host: str, port: int, path: str,
                     signing_secret: str | None = None) -> web.AppRunner:
    """Serve the bolt app's Events API at ``path`` plus ``/healthz`` and ``/readyz`` on
    ``host:port``; returns the started ``aiohttp.web.AppRunner`` (``cleanup()`` stops it). With
    ``signing_secret``, deliveries are checked before bolt sees them (:func:`intake`:
    401 unsigned, 400 malformed, one log line each).

    Raises:
        ConfigError: the port cannot be opened (in use, not allowed).
    """
    web_app = app.web_app(path=path)

    @web.middleware
    async def drain_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await replica.middleware(request, handler)

    web_app.middlewares.append(drain_gate)
    if signing_secret:
        web_app.middlewares.append(intake(signing_secret, path))
    web_app.router.add_get("/healthz", replica.healthz)
    web_app.router.add_get("/readyz", replica.readyz)
    web_app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as e:
        await runner.cleanup()
        raise ConfigError(f"I cannot listen on {host}:{port} ({e.strerror or e.__class__.__name__}); "
                          "choose another --port or [slack] port.") from None
    log.info("serving the Slack Events API on http://%s:%d%s (/healthz, /readyz, /metrics)", host, port, path)
    return runner


async def metrics(_: web.Request) -> web.Response:
    """``GET /metrics``: the Prometheus text exposition of :mod:`bot.metrics`."""
    body, content_type = await exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})




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
        ConfigError: Socket Mode cannot connect, or the HTTP port (or in Socket Mode ``[telemetry]
            metrics_port``) cannot be opened.
    """
    front = create_bolt_app(settings, service, client)
    signals = StopSignals()
    cut_short = False
    port = metrics_port(settings.telemetry) if options.mode == "socket" else contextlib.nullcontext()  # http: /metrics
    with signals.installed(), port:
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
