"""Starting and stopping the Discord front end: the URL overrides of ``[discord] api_base_url`` /
``gateway_url`` (a stand-in, a proxy), login, the first gateway connection whose failure is said in
one sentence, and the shutdown on SIGINT/SIGTERM. The ``hugginggpt discord`` command parses its
options and calls :func:`run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl

from bot.errors import ConfigError
from bot.metrics import metrics_port
from bot.settings import Settings, secret
from pipeline.redact import host_of, mask_credentials

from ..signals import StopSignals
from .bot_client import HuggingGPTBot

if TYPE_CHECKING:
    from bot.service import Service

log = logging.getLogger("hugginggpt.discord")

REFUSED_TOKEN = "Discord refused the bot token; copy it again from the Developer Portal (Bot > Reset Token)."
REFUSED_INTENT = ("Discord refused the Message Content intent: enable it in the Developer Portal "
                  "(Bot > Privileged Gateway Intents > Message Content Intent).")
NETWORK_ERRORS = (discord.DiscordException, aiohttp.ClientError, OSError, asyncio.TimeoutError)
"""What a failed start raises when the cause is Discord or the network (anything else is a bug)."""


def check_settings(settings: Settings) -> None:
    """Check that a bot token is configured (before the service opens).

    Raises:
        ConfigError: no ``[discord] token`` / ``DISCORD_BOT_TOKEN``.
    """
    if not secret(settings.discord.token):
        raise ConfigError("No Discord bot token: set DISCORD_BOT_TOKEN or [discord] token (see docs/discord.md).")


@contextlib.contextmanager
def platform_urls(settings: Settings) -> Iterator[None]:
    """discord.py's REST base URL and gateway URL from ``[discord] api_base_url`` / ``gateway_url``
    while inside (discord.py reads them from ``discord.http.Route.BASE`` and
    ``DiscordWebSocket.DEFAULT_GATEWAY``); restored on leaving."""
    saved = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    try:
        if settings.discord.api_base_url:
            discord.http.Route.BASE = settings.discord.api_base_url.rstrip("/")
        if settings.discord.gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.discord.gateway_url)
        yield
    finally:
        discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = saved


async def run(service: Service, settings: Settings, *, grace: float, shard_ids: list[int] | None = None,
              shard_count: int | None = None) -> None:
    """Run the Discord bot on ``service`` until SIGINT/SIGTERM (or cancellation), then drain.

    Args:
        service: the service the requests go to (the caller closes it afterwards).
        settings: all settings (``[discord]``).
        grace: seconds runs in flight may finish on shutdown.
        shard_ids, shard_count: the shards this process runs (``None``: what Discord recommends).

    Raises:
        ConfigError: Discord refused the token or an intent, or cannot be reached, or ``[telemetry]
            metrics_port`` cannot be opened (exit status 2).
    """
    bot = HuggingGPTBot(service, settings, shutdown_grace=grace, shard_ids=shard_ids, shard_count=shard_count)
    signals = StopSignals()
    with signals.installed(), platform_urls(settings), metrics_port(settings.telemetry):  # /metrics, when set
        try:
            await login(bot, settings)
            runner = asyncio.create_task(bot.connect(reconnect=True), name="discord-gateway")
            failure = await first_connection(bot, runner, signals.stop)
            if failure is not None:
                runner.cancel()
                if not isinstance(failure, NETWORK_ERRORS):
                    raise failure  # not a network or Discord failure: a bug, with its traceback
                raise start_failure(failure, str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)) from None
            log.info("shutting down: %d runs in flight", bot.runs_in_flight)
            await bot.close()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner
        finally:
            if not bot.is_closed():
                await bot.close()


async def login(bot: HuggingGPTBot, settings: Settings) -> None:
    """Log in with the bot token (``GET /users/@me``).

    Raises:
        ConfigError: the token is refused, or the REST API cannot be reached.
    """
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


async def first_connection(bot: HuggingGPTBot, runner: asyncio.Task[None], stop: asyncio.Event) -> BaseException | None:
    """Wait until the bot is ready and then until ``stop``; returns why the gateway failed for
    good (at start, or a close code discord.py does not reconnect after), or ``None`` on ``stop``."""
    started = asyncio.create_task(bot.started())
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({runner, started, waiter}, return_when=asyncio.FIRST_COMPLETED)
        failure = started.result() if started.done() else None
        if started.done() and failure is None:
            log.info("ready (process %d): %s", os.getpid(), bot.shard_summary())
        if failure is not None and not runner.done():
            await asyncio.wait({runner}, timeout=0.5)  # a refused intent ends the connect loop at once
        if runner.done():  # the first failure is the cause (discord.py may then fail on its own state)
            return failure or runner.exception()
        started.cancel()
        if failure is None and not waiter.done():
            await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
            failure = runner.exception() if runner.done() else None
        return failure
    finally:
        started.cancel()
        waiter.cancel()


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
    code = error.code if isinstance(error, discord.ConnectionClosed) else None
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
