"""``hugginggpt mcp [--sandbox]``: HuggingGPT as an MCP server over stdio, for Claude Desktop,
Cursor and any other MCP client that starts its servers as programs (docs/mcp.md).

stdout carries the protocol only: nothing else is printed there; logs go to the log file (and to
stderr with ``-v``). The server ends when the client closes stdin; runs in flight are then
stopped and stored as interrupted. The HTTP variant is ``/mcp`` of ``hugginggpt serve``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .common import add_sandbox_option

if TYPE_CHECKING:
    from bot.settings import Settings


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``mcp`` subcommand to the CLI's subparsers; returns the new parser."""
    p = subparsers.add_parser("mcp", help="serve HuggingGPT as an MCP server over stdio (Claude Desktop, Cursor, ...)")
    add_sandbox_option(p)
    p.set_defaults(handler=main)
    return p


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Serve over stdin/stdout until the client closes the connection. Returns 0.

    Raises:
        ConfigError: a credential or setting is missing (exit status 2, said on stderr).
        StorageError: the conversation store cannot be opened (exit status 8).
    """
    from adapters.mcp import build, serve_stdio

    from bot.service import Service
    from . import package_version

    service = await Service.create(settings)
    server, tasks = build(service, version=package_version())
    try:
        await serve_stdio(server)
    finally:
        await tasks.close()  # the runs of MCP tasks still working stop, as a Stop does
        await service.close()
    return 0
