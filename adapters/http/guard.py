"""What a web browser may do to the API: the checks before any route (the MCP endpoint included).

A page open in a browser on the operator's machine can send requests to ``127.0.0.1``: a
cross-origin "simple request" (``text/plain`` or a form POST, no preflight) or, after rebinding its
own DNS name to ``127.0.0.1``, same-origin requests with its name in ``Host``. Without API keys the
server answers loopback peers, so both would spend the operator's credit. Refused here, in order:

1. ``Host`` not in ``[server] allowed_hosts`` (default: the bound address and its loopback names,
   and ``public_url``'s host; any name when bound to ``0.0.0.0``/``::``, where keys are required):
   421 ``invalid_host`` (DNS rebinding; RFC 9110 §15.5.20, as the MCP SDK answers it).
2. ``Origin`` present and neither in ``[server] cors_origins`` nor this server's own origin
   (``scheme://Host``): 403 ``origin_not_allowed`` (cross-site requests and forms; browsers send
   ``Origin`` on every cross-origin request and every POST, the Fetch standard's "origin" header).
3. A body whose ``Content-Type`` is neither ``application/json`` nor ``multipart/form-data``: 415
   ``unsupported_media_type`` (the JSON endpoints check again, JSON only:
   :func:`adapters.http.common.read_json`).

CORS (``CORSMiddleware``) is installed only when ``cors_origins`` lists origins, and then only for
them; no credentials (access is by bearer key, never by cookie).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any
from urllib.parse import urlsplit

from bot.settings import ServerSettings

from .errors import ApiError
from .fetch import host_allowed

log = logging.getLogger("adapters.http")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names a loopback-bound server answers to by default."""
BODY_TYPES = ("application/json", "multipart/form-data")
"""Content types a request body may have (415 otherwise)."""


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower case, without parameters (``""`` if none)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def split_host(value: str) -> str:
    """The host name of a ``Host`` header value (``[::1]:8000`` → ``::1``, ``Example.org.`` →
    ``example.org``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0].rstrip(".") if value.count(":") == 1 else value.rstrip(".")


def default_hosts(settings: ServerSettings, bound_host: str) -> list[str]:
    """The names the server answers to when ``[server] allowed_hosts`` is empty.

    Args:
        settings: ``[server]`` (``public_url``'s host joins the list).
        bound_host: the address the server is bound to (``--host``).

    Returns:
        ``["*"]`` (any) for a wildcard bind (``0.0.0.0``, ``::``; keys are required there);
        otherwise the bound address, the loopback names and ``public_url``'s host.
    """
    bound = bound_host.strip("[]").lower()
    try:
        if ipaddress.ip_address(bound).is_unspecified:
            return ["*"]
    except ValueError:
        pass
    names = [*LOOPBACK_NAMES, bound]
    if settings.public_url and (public := urlsplit(settings.public_url).hostname):
        names.append(public.lower())
    return sorted(set(names))


class BrowserGuard:
    """ASGI middleware applying the module's three checks to every HTTP request.

    Args:
        app: the wrapped ASGI application.
        allowed_hosts: host names (``*.domain``, ``*`` for any); see :func:`default_hosts`.
        cors_origins: origins (``scheme://host[:port]``) whose pages may call.
    """

    def __init__(self, app: Any, *, allowed_hosts: list[str], cors_origins: list[str]) -> None:
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.hosts = [h for h in allowed_hosts if h != "*"]
        self.origins = set(cors_origins)

    def refusal(self, scope: dict[str, Any]) -> ApiError | None:
        """The error ``scope``'s request gets, or ``None`` when it may go on."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if not self.any_host and not host_allowed(split_host(host), self.hosts):
            return ApiError(421, "This server does not answer to that host name; the operator can add it to "
                                 "[server] allowed_hosts.", "invalid_host")
        origin = headers.get("origin")
        if origin is not None:
            own = f"{scope.get('scheme', 'http')}://{host.lower()}"
            if origin.lower().rstrip("/") not in self.origins and origin.lower() != own:
                return ApiError(403, "Requests from web pages of other sites are refused; the operator can allow "
                                     "an origin in [server] cors_origins.", "origin_not_allowed")
        has_body = headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers
        if has_body and media_type(headers.get("content-type")) not in BODY_TYPES:
            return ApiError(415, "Send the request body as application/json.", "unsupported_media_type")
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (err := self.refusal(scope)) is not None:
            headers = dict((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", []))
            log.info("%s %s -> %d %s (host %r, origin %r, content-type %r)", scope.get("method"), scope.get("path"),
                     err.status, err.code, headers.get("host"), headers.get("origin"), headers.get("content-type"))
            await err.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)
