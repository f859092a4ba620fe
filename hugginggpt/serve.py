"""``hugginggpt serve``: the HTTP API (docs/http-api.md).

    hugginggpt serve [--host 127.0.0.1] [--port 8000] [--sandbox] [--grace S]

OpenAI-compatible ``/v1/chat/completions`` (model ``hugginggpt``), ``/v1/models``,
``/v1/files/{id}``; the MCP server at ``/mcp`` (streamable HTTP); the reference
implementation's ``/hugginggpt``, ``/tasks``, ``/results``;
``/healthz``, ``/readyz``, ``/openapi.json``. Clients send ``Authorization: Bearer KEY`` with a key
of ``[server] api_keys`` (``HUGGINGGPT_SERVER__API_KEYS``). With no key configured the server only
binds to a loopback address and only answers its own host (said in the log); nothing secret is
generated. SIGINT/SIGTERM stop it gracefully: no new connections, runs in flight get up to
``--grace`` seconds, the rest are cancelled and stored as interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
from typing import TYPE_CHECKING, Any

from bot.errors import ConfigError
from .common import add_grace_option, add_sandbox_option, port_number

if TYPE_CHECKING:
    from bot.settings import Settings

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to the CLI's subparsers; returns the new parser."""
    p = subparsers.add_parser("serve", help="run the HTTP API (OpenAI-compatible, and the reference /hugginggpt)")
    p.add_argument("--host", default=None, help="address to bind (default: [server] host, 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=None, help="port to listen on (default: [server] port, 8000; 0: any free)")
    add_grace_option(p)
    add_sandbox_option(p)
    p.set_defaults(handler=main)
    return p


def check_binding(settings: Settings, host: str) -> None:
    """Refuse to serve without API keys on anything but loopback.

    Raises:
        ConfigError: no key is configured and ``host`` is not a loopback address.
    """
    from adapters.http.auth import is_loopback

    if not settings.server.api_keys and not is_loopback(host):
        raise ConfigError(f"Serving on {host} needs API keys: set [server] api_keys or HUGGINGGPT_SERVER__API_KEYS, "
                          "or bind to 127.0.0.1.")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``.

    Raises:
        ConfigError: the address cannot be bound (in use, not an address of this machine).
    """
    from expert_server.server import listen

    try:
        return listen(host, port)
    except OSError as e:
        raise ConfigError(f"I cannot listen on {host}:{port} ({e.strerror or e.__class__.__name__}); "
                          "choose another --port or [server] port.") from None


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until SIGINT/SIGTERM (or cancellation). Returns the exit status (0).

    Raises:
        ConfigError: no key on a non-loopback address, the port cannot be opened, or a setting is
            unusable (exit status 2).
    """
    import uvicorn

    from adapters.http import create_app
    from adapters.mcp.http import mount as mount_mcp
    from adapters.signals import on_signals

    from bot.metrics import process_ended
    from bot.service import Service
    from . import package_version

    host = args.host or settings.server.host
    port = settings.server.port if args.port is None else args.port
    check_binding(settings, host)
    sock = bind(host, port)
    service = await Service.create(settings)
    app = create_app(settings, service, version=package_version(), bound_host=host)
    mcp = mount_mcp(app, version=package_version())  # the MCP server at /mcp: the same keys, limits and conversations
    config = uvicorn.Config(app, log_config=None, access_log=False, timeout_graceful_shutdown=args.grace,
                            server_header=False, lifespan="off")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # ours, below
    def stop(_sig: signal.Signals) -> None:
        app.state.hugginggpt.ready = False
        server.should_exit = True

    bound = sock.getsockname()
    url = f"http://{'[' + bound[0] + ']' if ':' in bound[0] else bound[0]}:{bound[1]}"
    if settings.server.api_keys:
        log.info("serving the HTTP API on %s with %d API key(s)", url, len(settings.server.api_keys))
    else:
        log.warning("serving the HTTP API on %s WITHOUT API keys: only requests from this host are answered", url)
    print(f"HuggingGPT API on {url}/v1 (model hugginggpt); press Ctrl-C to stop.", flush=True)
    with on_signals(stop, signal.SIGINT, signal.SIGTERM):
        try:
            await server.serve(sockets=[sock])
        finally:
            app.state.hugginggpt.ready = False
            await asyncio.shield(mcp.close())
            await asyncio.shield(service.close())
            process_ended()  # several processes sharing PROMETHEUS_MULTIPROC_DIR: this one no longer counts
            sock.close()
    return 0
