"""The MCP server over streamable HTTP at ``/mcp`` inside ``hugginggpt serve``.

The same rules as the OpenAI-compatible API (:mod:`adapters.http.auth`): ``Authorization: Bearer
KEY`` with a key of ``[server] api_keys`` (401 without one, before the MCP layer sees the request;
with no key configured, loopback peers only), the per-key rate and concurrency limits, and the
per-key conversations (a ``conversation_id`` here is the API's conversation name, so a
conversation may go on through either). ``Host``, ``Origin`` and ``Content-Type`` are checked by
the application's :class:`adapters.http.guard.BrowserGuard` before this endpoint sees a request
(``[server] allowed_hosts`` and ``cors_origins``, the same for every route), so the SDK's own
DNS-rebinding check is off rather than a second, differently configured list.

A session belongs to the key that opened it: the request reaches the SDK with the key id as its
authenticated user (Starlette's ``scope["user"]``, the SDK's ``AuthenticatedUser``), and the
SDK's session manager answers another key's request for that session (a ``DELETE`` included)
as if the session did not exist: 404 "Session not found", with one warning in the log.

Both protocol eras are served at the same path: the SDK's session manager hands a request whose
``MCP-Protocol-Version`` header names the stateless 2026-07-28 revision to its stateless path (no
session, the ``_meta`` envelope checked on each request), any other to the handshake era's
sessions; the key is checked before either, and again by :class:`KeyAccess` on each call.

The SDK's session manager needs a running task group: it is started by the first request (the
API runs without an ASGI lifespan) and stopped by :meth:`McpEndpoint.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from mcp import types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.routing import Route

from adapters.http.auth import Caller, Keys
from adapters.http.common import PLATFORM, State
from adapters.http.errors import ApiError

from .server import build

log = logging.getLogger("adapters.mcp")
PATH = "/mcp"


class KeyAccess:
    """:class:`adapters.mcp.server.Access` by the HTTP API's keys and limits."""

    platform = PLATFORM
    names_conversations = True

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    async def caller(self, ctx: Any) -> str:
        """The key id of the request's ``Authorization`` header (checked again: a session id
        alone never stands for a key).

        Raises:
            MCPError: no or a wrong key.
        """
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None) or {}
        client = getattr(request, "client", None)
        try:
            return self.keys.authenticate(headers.get("authorization"), client.host if client else None).key_id
        except ApiError as e:
            raise MCPError(types.INVALID_REQUEST, e.message) from None

    async def admit(self, caller: str) -> Callable[[], None]:
        """Count the call against the key's rate and reserve one of its concurrent runs.

        Raises:
            MCPError: over a limit (the API's 429 sentence).
        """
        who = Caller(caller, None)
        try:
            await self.keys.count_request(who)
            return await self.keys.reserve(who)
        except ApiError as e:
            raise MCPError(types.INVALID_REQUEST, e.message) from None


def key_user(key_id: str) -> AuthenticatedUser:
    """The SDK's authenticated user for the API key ``key_id`` (its id, never the key itself):
    the owner of the sessions it opens (see the module docstring)."""
    return AuthenticatedUser(AccessToken(token=key_id, client_id=key_id, scopes=[]))


class McpEndpoint:
    """The ASGI application at ``/mcp``: authenticates, then hands the request to the SDK's
    streamable HTTP session manager.

    Args:
        state: the API's state (settings, service, keys).
        version: shown to clients as the server's version.
    """

    def __init__(self, state: State, *, version: str = "") -> None:
        self.keys = state.keys
        server, self.tasks = build(state.service, KeyAccess(state.keys), version=version)
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)  # BrowserGuard's job
        self.manager = StreamableHTTPSessionManager(app=server, security_settings=security,
                                                    max_request_body_size=state.settings.server.max_body_bytes)
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # pragma: no cover - only HTTP reaches a route
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = scope.get("client")
        try:
            caller = self.keys.authenticate(headers.get("authorization"), client[0] if client else None)
        except ApiError as e:
            log.info("%s %s -> 401: %s", scope.get("method"), PATH, e.message)
            await e.response()(scope, receive, send)
            return
        await self._started()
        await self.manager.handle_request({**scope, "user": key_user(caller.key_id)}, receive, send)

    async def _started(self) -> None:
        async with self._lock:
            if self._runner is None:
                ready = asyncio.Event()
                self._runner = asyncio.create_task(self._run(ready), name="mcp-http-sessions")
                await ready.wait()

    async def _run(self, ready: asyncio.Event) -> None:
        async with self.manager.run():
            ready.set()
            await self._stop.wait()

    async def close(self) -> None:
        """Stop the runs of MCP tasks still working (as a Stop does) and the session manager
        (open MCP sessions end; their runs are cancelled)."""
        await self.tasks.close()
        self._stop.set()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner, 10)


def mount(app: Any, *, version: str = "") -> McpEndpoint:
    """Serve the MCP endpoint at ``/mcp`` of the API ``app`` (built by
    :func:`adapters.http.create_app`, whose ``app.state.hugginggpt`` it uses); returns it (close
    it when the server stops)."""
    endpoint = McpEndpoint(app.state.hugginggpt, version=version)
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    return endpoint
