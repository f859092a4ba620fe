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
    import discord.gateway
    import discord.http
    import yarl

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
    urls = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    try:
        if settings.discord.api_base_url:
            discord.http.Route.BASE = settings.discord.api_base_url.rstrip("/")
        if settings.discord.gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.discord.gateway_url)
        try:
            await bot.login(secret(settings.discord.token) or "")
        except discord.LoginFailure:
            raise ConfigError(REFUSED_TOKEN) from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, discord.DiscordServerError) as e:
            raise ConfigError(
                f"Discord cannot be reached ({host_of(discord.http.Route.BASE)}: {e.__class__.__name__}); "
                "check the network, a proxy, or [discord] api_base_url.",
                mask_credentials(repr(e)),
            ) from None
        runner = asyncio.create_task(bot.connect(reconnect=True), name="discord-gateway")
        started = asyncio.create_task(bot.started())
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait({runner, started, waiter}, return_when=asyncio.FIRST_COMPLETED)
        failure = started.result() if started.done() else None
        if failure is not None and not runner.done():
            await asyncio.wait({runner}, timeout=0.5)  # a refused intent ends the connect loop at once
        if runner.done():  # the first failure is the cause (discord.py may then fail on its own state)
            failure = failure or runner.exception()
        else:
            started.cancel()
            if failure is None and not waiter.done():
                await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
                failure = runner.exception() if runner.done() else None
        if failure is not None:
            runner.cancel()
            if not isinstance(failure, (discord.DiscordException, aiohttp.ClientError, OSError, asyncio.TimeoutError)):
                raise failure  # not a network or Discord failure: a bug, with its traceback
            raise start_failure(failure, str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)) from None
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
        discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = urls


REFUSED_TOKEN = "Discord refused the bot token; copy it again from the Developer Portal (Bot > Reset Token)."
REFUSED_INTENT = ("Discord refused the Message Content intent: enable it in the Developer Portal "
                  "(Bot > Privileged Gateway Intents > Message Content Intent).")


def start_failure(error: BaseException, gateway: str) -> ConfigError:
    """The sentence for a gateway connection that failed for good (at start, or a close code
    discord.py does not reconnect after).

    Args:
        error: what the first connection raised (``discord.PrivilegedIntentsRequired``,
            ``discord.ConnectionClosed`` with Discord's close code, ``aiohttp.ClientError``,
            ``OSError``, ``asyncio.TimeoutError``, ...).
        gateway: the gateway URL tried (named by host only).

    Returns:
        A :class:`ConfigError` (exit status 2) whose detail, for the log, adds ``repr(error)`` with
        URL credentials masked. Close codes: Discord API docs, "Gateway Close Event Codes".
    """
    import discord

    code = getattr(error, "code", None)
    if isinstance(error, discord.PrivilegedIntentsRequired) or code in (4013, 4014):
        sentence = REFUSED_INTENT
    elif code == 4004:
        sentence = REFUSED_TOKEN
    elif isinstance(error, discord.ConnectionClosed):
        sentence = f"The Discord gateway closed the connection (code {code}); see the log."
    else:
        sentence = (f"The Discord gateway cannot be reached ({host_of(gateway)}: {error.__class__.__name__}); "
                    "check the network, a proxy, or [discord] gateway_url.")
    return ConfigError(sentence, f"{sentence} ({mask_credentials(repr(error))})")
