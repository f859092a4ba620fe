"""``hugginggpt discord``: run the Discord front end until Ctrl-C / SIGTERM.

Setup (intents, permissions, invite URL): ``docs/discord.md``.

Sharding (issue 11): ``--shard-ids 0-3 --shard-count 8`` runs shards 0..3 of 8 in this process;
run the other ranges in other processes on the same store (``docs/operations.md``, "Discord
sharding"). Without the options one process runs every shard Discord recommends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
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
        The ``discord`` parser (flags: ``--sandbox``, ``--grace SECONDS``, ``--shard-ids IDS``,
        ``--shard-count N``; the shard options are checked by :func:`shard_plan` in :func:`main`).
    """
    p = subparsers.add_parser(
        "discord",
        help="run the Discord bot (/ask command, threads as conversations)",
        description="Run the Discord bot. Needs [discord] token (or DISCORD_BOT_TOKEN); see docs/discord.md.",
    )
    add_sandbox_option(p, "DISCORD_BOT_TOKEN is")
    add_grace_option(p)
    p.add_argument("--shard-ids", metavar="IDS",
                   help="the shards this process runs: a range (0-3), a list (0,2,5) or both (0-3,6); needs --shard-count")
    p.add_argument("--shard-count", metavar="N",
                   help="the bot's total number of shards, the same in every process (default: what Discord recommends)")
    p.set_defaults(handler=main)
    return p


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Start the service and the bot; stop cleanly on SIGINT/SIGTERM.

    Returns:
        0 after a clean shutdown.

    Raises:
        ConfigError: bad ``--shard-ids`` / ``--shard-count``, no bot token is configured, Discord
            refused it, or Discord cannot be reached (exit status 2).
    """
    import aiohttp
    import discord
    import discord.gateway
    import discord.http
    import yarl

    from adapters.discord.bot_client import HuggingGPTBot

    from ..service import Service

    shard_ids, shard_count = shard_plan(getattr(args, "shard_ids", None), getattr(args, "shard_count", None))
    if not secret(settings.discord.token):
        raise ConfigError("No Discord bot token: set DISCORD_BOT_TOKEN or [discord] token (see docs/discord.md).")
    service = await Service.create(settings)
    bot = HuggingGPTBot(service, settings, shutdown_grace=args.grace, shard_ids=shard_ids, shard_count=shard_count)
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
        if started.done() and failure is None:
            log.info("ready (process %d): %s", os.getpid(), bot.shard_summary())
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


def shard_plan(ids_text: str | None, count_text: str | None) -> tuple[list[int] | None, int | None]:
    """Check ``--shard-ids`` and ``--shard-count``.

    Args:
        ids_text: ``--shard-ids``: ranges ``A-B`` and single ids, comma-separated (``"0-3"``,
            ``"0,2,5"``, ``"0-3,6"``), or ``None``.
        count_text: ``--shard-count``: a whole number of at least 1, or ``None``.

    Returns:
        ``(shard ids sorted without repeats, shard count)``; ``(None, None)`` without options (all
        the shards Discord recommends); ``(None, N)`` with only a count (all N shards here).

    Raises:
        ConfigError: one sentence (exit status 2): a malformed id list or count, ids without a
            count, or an id outside ``0..count-1`` (Discord API docs, "Gateway > Sharding":
            ``shard_id`` is in ``[0, num_shards)``).
    """
    count: int | None = None
    if count_text is not None:
        if not re.fullmatch(r"\s*\d+\s*", count_text) or int(count_text) < 1:
            raise ConfigError(f"--shard-count must be a whole number of at least 1, not {count_text!r}.")
        count = int(count_text)
    if ids_text is None:
        return None, count
    if count is None:
        raise ConfigError("--shard-ids needs --shard-count (the bot's total number of shards, the same in every process).")
    ids: set[int] = set()
    for part in ids_text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        low, high = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (0, -1)
        if m is None or high < low:
            raise ConfigError(f"--shard-ids takes ids and ranges such as 0-3 or 0,2,5; {part.strip()!r} is not one.")
        if high >= count:  # checked before the range is expanded
            raise ConfigError(f"Shard {high} is outside 0-{count - 1}: with --shard-count {count}, "
                              f"shard ids go from 0 to {count - 1}.")
        ids.update(range(low, high + 1))
    return sorted(ids), count


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
