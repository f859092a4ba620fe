"""Who may call the expert server: the checks before any route, as the bot's HTTP API makes them
(:mod:`adapters.http.guard` and :mod:`adapters.http.auth`; the server is a separate deployable and
does not import the bot).

A web page open on the operator's machine can send requests to ``127.0.0.1``: cross-origin
"simple requests" (no preflight), or same-origin ones after rebinding its own DNS name to
``127.0.0.1``. Refused here, in order, each with one sentence and one log line:

1. ``Host`` not in ``allowed_hosts`` (default: ``localhost``, ``127.0.0.1``, ``::1`` and the bound
   address; any name with a wildcard bind, where ``api_key`` is required): 421 (DNS rebinding;
   RFC 9110 §15.5.20).
2. ``Origin`` present and neither in ``cors_origins`` nor this server's own origin: 403 (browsers
   send ``Origin`` on every cross-origin request and every POST, the Fetch standard).
3. With ``api_key`` set, every route but ``/healthz`` and ``/readyz`` needs
   ``Authorization: Bearer <api_key>`` (compared in constant time): 401 otherwise.

:func:`check_bind` refuses to start on an address other than loopback without ``api_key``.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import Any

from fastapi.responses import JSONResponse

from .config import ServerConfig
from .errors import ExpertError, Forbidden, Unauthorized, WrongHost, shown

log = logging.getLogger("expert_server")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names a loopback-bound server answers to by default."""
OPEN_PATHS = ("/healthz", "/readyz")
"""Routes answered without the API key (a load balancer's probes)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(config: ServerConfig) -> None:
    """Refuse settings that would serve the network without a key.

    Raises:
        ValueError: ``host`` is not a loopback address and ``api_key`` is empty.
    """
    if not is_loopback(config.host) and not (config.api_key and config.api_key.get_secret_value()):
        raise ValueError(f"the expert server would listen on {config.host} without an API key: set api_key "
                         "(HUGGINGGPT_EXPERTS_API_KEY) or bind 127.0.0.1 (docs/experts.md, 'Exposing it')")


def default_hosts(bound_host: str) -> list[str]:
    """The Host names answered when ``allowed_hosts`` is empty: ``["*"]`` for a wildcard bind
    (``0.0.0.0``, ``::``), else the loopback names and the bound address."""
    bound = bound_host.strip("[]").lower()
    try:
        if ipaddress.ip_address(bound).is_unspecified:
            return ["*"]
    except ValueError:
        pass
    return sorted({*LOOPBACK_NAMES, bound})


def split_host(value: str) -> str:
    """The host name of a ``Host`` header value (``[::1]:8081`` → ``::1``, ``Example.org.`` →
    ``example.org``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0].rstrip(".") if value.count(":") == 1 else value.rstrip(".")


def host_allowed(host: str, allowed: list[str]) -> bool:
    """Whether ``host`` matches an entry of ``allowed`` (exact, ``*.domain`` for subdomains, ``*``)."""
    for entry in allowed:
        if entry == "*" or host == entry or (entry.startswith("*.") and (host.endswith(entry[1:]) or host == entry[2:])):
            return True
    return False


class AccessGuard:
    """ASGI middleware applying the module's three checks to every HTTP request.

    Args:
        app: the wrapped ASGI application. config: ``allowed_hosts``, ``cors_origins``, ``api_key``
        and ``host`` (the bound address, for the default host names).
    """

    def __init__(self, app: Any, config: ServerConfig) -> None:
        self.app = app
        self.hosts = [h.lower().rstrip(".") for h in config.allowed_hosts] or default_hosts(config.host)
        self.origins = {o.lower().rstrip("/") for o in config.cors_origins}
        key = config.api_key.get_secret_value() if config.api_key else ""
        self.key = key.encode() if key else None

    def refusal(self, scope: dict[str, Any], headers: dict[str, str]) -> ExpertError | None:
        """The error ``scope``'s request gets, or ``None`` when it may go on."""
        host = headers.get("host", "")
        if not host_allowed(split_host(host), self.hosts):
            return WrongHost("This expert server does not answer to that host name; the operator can add it to "
                             "allowed_hosts.")
        origin = headers.get("origin")
        if origin is not None and origin.lower().rstrip("/") not in self.origins \
                and origin.lower() != f"{scope.get('scheme', 'http')}://{host.lower()}":
            return Forbidden("Requests from web pages of other sites are refused; the operator can allow an origin "
                             "in cors_origins.")
        if self.key is not None and scope.get("path") not in OPEN_PATHS:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.key):
                return Unauthorized("This expert server needs its API key: send 'Authorization: Bearer KEY'.")
        return None

    def response(self, scope: dict[str, Any], headers: dict[str, str]) -> JSONResponse | None:
        """The refusal of ``scope``'s request as a response (one log line said), or ``None`` when it
        may go on; ``headers``: its headers, names in lower case."""
        err = self.refusal(scope, headers)
        if err is None:
            return None
        log.warning("%d %s %s: %s (host %s, origin %s)", err.status, scope.get("method"),
                    shown(scope.get("path", "")), err.message, shown(headers.get("host", "")),
                    shown(headers.get("origin", "-")))
        extra = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
        return JSONResponse(err.body(), status_code=err.status, headers=extra)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            refused = self.response(scope, headers)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)
