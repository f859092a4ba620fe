"""``hugginggpt slack``: run the Slack front end.

    hugginggpt slack [--mode socket|http] [--port N] [--host H] [--api-url URL] [--grace S] [--sandbox]

Socket Mode (default) needs no public URL; HTTP mode serves the Events API with ``/healthz`` and
``/readyz`` behind a load balancer. The first SIGTERM/SIGINT drains (runs in flight get ``--grace``
seconds), a second one stops at once (exit status 130). Serving, health and the drain are the
adapter's: :mod:`adapters.slack.serve`.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from .common import INTERRUPTED, add_grace_option, add_sandbox_option, port_number

if TYPE_CHECKING:
    from bot.settings import Settings


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``slack`` subcommand to the CLI's subparsers; returns the new parser."""
    p = subparsers.add_parser("slack", help="run the Slack bot (Socket Mode or HTTP Events API)")
    p.add_argument("--mode", choices=["socket", "http"], default=None, help="default: [slack] mode (socket)")
    p.add_argument("--port", type=port_number, default=None, help="HTTP mode: port to listen on (default: [slack] port, 3000)")
    p.add_argument("--host", default=None, help="HTTP mode: address to bind (default: [slack] host, 0.0.0.0)")
    p.add_argument("--api-url", default=None,
                   help="Slack Web API base URL (default https://slack.com/api/; GovSlack: https://slack-gov.com/api/)")
    add_grace_option(p)
    add_sandbox_option(p, "SLACK_BOT_TOKEN, and SLACK_APP_TOKEN or SLACK_SIGNING_SECRET, are")
    p.set_defaults(handler=main)
    return p


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Check the credentials, build the service and serve Slack until SIGINT/SIGTERM.

    Returns:
        The exit status: 0 after a drain, 130 when a second signal cut it short.

    Raises:
        ConfigError: a credential is missing or refused, Slack cannot be reached, or the HTTP port
            cannot be opened (exit status 2).
    """
    from adapters.slack import serve

    from bot.service import Service

    options = serve.ServeOptions(
        mode=args.mode or settings.slack.mode,
        host=args.host or settings.slack.host,
        port=settings.slack.port if args.port is None else args.port,
        grace=args.grace,
    )
    client = await serve.connect(settings, options.mode, args.api_url)  # before the store opens
    service = await Service.create(settings)
    try:
        cut_short = await serve.run(settings, service, client, options)
    finally:
        await asyncio.shield(service.close())
    return INTERRUPTED if cut_short else 0
