"""Slack HTTP mode's own endpoints besides the Events API: liveness (``GET /healthz``), readiness
(``GET /readyz``) and the drain gate that refuses new events while the replica stops.

* ``GET /healthz``: liveness, ``200 ok`` while the process runs;
* ``GET /readyz``: readiness, ``200 ready`` when the conversation store answers and the replica is
  not draining, else ``503`` with a one-line reason (take the replica out of the pool);
* while draining, Events API deliveries get ``503`` (a load balancer retries them on another
  replica, e.g. nginx ``proxy_next_upstream http_503 non_idempotent``; Slack itself retries a 503
  later); interactions (Stop, feedback buttons) still pass, for the runs in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from slack_bolt.async_app import AsyncApp

from bot.errors import ConfigError

from .intake import intake

log = logging.getLogger("adapters.slack.serve")

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
    ``signing_secret``, deliveries are checked before bolt sees them (:mod:`adapters.slack.intake`:
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
