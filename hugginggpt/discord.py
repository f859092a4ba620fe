"""``hugginggpt discord``: run the Discord front end until Ctrl-C / SIGTERM.

Setup (intents, permissions, invite URL): ``docs/discord.md``.

Sharding: ``--shard-ids 0-3 --shard-count 8`` runs shards 0..3 of 8 in this process;
run the other ranges in other processes on the same store (``docs/operations.md``, "Discord
sharding"). Without the options one process runs every shard Discord recommends.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

from bot.errors import ConfigError
from .common import add_grace_option, add_sandbox_option

if TYPE_CHECKING:
    from bot.settings import Settings


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
    """Check the options and the token, build the service and run the bot
    (:func:`adapters.discord.launch.run`) until SIGINT/SIGTERM.

    Returns:
        0 after a clean shutdown.

    Raises:
        ConfigError: bad ``--shard-ids`` / ``--shard-count``, no bot token is configured, Discord
            refused it, or Discord cannot be reached (exit status 2).
    """
    from adapters.discord import launch

    from bot.service import Service

    shard_ids, shard_count = shard_plan(args.shard_ids, args.shard_count)
    launch.check_settings(settings)
    service = await Service.create(settings)
    try:
        await launch.run(service, settings, grace=args.grace, shard_ids=shard_ids, shard_count=shard_count)
    finally:
        await service.close()
    return 0


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
