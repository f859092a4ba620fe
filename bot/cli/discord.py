"""``hugginggpt discord``: run the Discord front end until Ctrl-C / SIGTERM.

Setup (intents, permissions, invite URL): ``docs/discord.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from typing import Any

from pipeline.redact import host_of, mask_credentials

from ..errors import ConfigError
from ..settings import Settings, secret
from .common import add_grace_option, add_sandbox_option

log = logging.getLogger("hugginggpt.discord")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``discord`` to the CLI's subparsers.

    Args:
        subparsers: the object ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The ``discord`` parser (flags: ``--sandbox``, ``--grace SECONDS``).
    """
    p = subparsers.add_parser(
        "discord",
        help="run the Discord bot (/ask command, threads as conversations)",
        description="Run the Discord bot. Needs [discord] token (or DISCORD_BOT_TOKEN); see docs/discord.md.",
    )
    add_sandbox_option(p)
    add_grace_option(p)
    p.set_defaults(handler=main)
    return p


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Start the service and the bot; stop cleanly on SIGINT/SIGTERM.

    Returns:
        0 after a clean shutdown.

    Raises:
        ConfigError: no bot token is configured, Discord refused it, or Discord cannot be reached
            (exit status 2).
    """
    import aiohttp
    import discord
    import discord.http

    from adapters.discord.bot_client import HuggingGPTBot

    from ..service import Service

    if not secret(settings.discord.token):
        raise ConfigError("No Discord bot token: set DISCORD_BOT_TOKEN or [discord] token (see docs/discord.md).")
    service = await Service.create(settings)
    bot = HuggingGPTBot(service, settings, shutdown_grace=args.grace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        if settings.discord.api_base_url:
            discord.http.Route.BASE = settings.discord.api_base_url.rstrip("/")
        try:
            await bot.login(secret(settings.discord.token) or "")
        except discord.LoginFailure:
            raise ConfigError("Discord refused the bot token; copy it again from the Developer Portal (Bot > Reset Token).") from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            raise ConfigError(
                f"Discord cannot be reached ({host_of(discord.http.Route.BASE)}: {e.__class__.__name__}); "
                "check the network, a proxy, or [discord] api_base_url.",
                mask_credentials(repr(e)),
            ) from None
        runner = asyncio.create_task(bot.connect(reconnect=True), name="discord-gateway")
        waiter = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if runner in done:
            exc = runner.exception()
            if isinstance(exc, discord.PrivilegedIntentsRequired):
                raise ConfigError("Discord refused the Message Content intent: enable it in the Developer Portal "
                                  "(Bot > Privileged Gateway Intents > Message Content Intent).") from None
            if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError, discord.GatewayNotFound)):
                raise ConfigError(f"The Discord gateway cannot be reached ({exc.__class__.__name__}); check the network.",
                                  mask_credentials(repr(exc))) from None
            if exc is not None:
                raise exc
        log.info("shutting down: %d runs in flight", bot.runs_in_flight)
        waiter.cancel()
        await bot.close()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner
        return 0
    finally:
        if not bot.is_closed():
            await bot.close()
        await service.close()
