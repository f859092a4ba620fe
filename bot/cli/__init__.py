"""``hugginggpt``: the command line, the one place above the adapters.

    hugginggpt run TEXT [--file PATH]... [--json] [--sandbox]
    hugginggpt chat [--conversation ID] [--sandbox]
    hugginggpt store prune|forget ID
    hugginggpt catalog refresh|show ...
    hugginggpt discord [--sandbox] [--grace S]
    hugginggpt slack [--mode socket|http] [--sandbox] [--grace S]

One module per command, each with ``add_parser(subparsers)`` and ``async main(args, settings) ->
int``. Every failure a user can cause ends as one sentence on stderr and the exit status of its
class (:mod:`bot.cli.common`); details go to ``<data_dir>/logs/hugginggpt.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

# huggingface_hub reads this when it is first imported (below, through the commands).
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from pipeline.errors import HuggingGPTError

from . import catalog, chat, discord, run, slack, store
from .common import INTERRUPTED, exit_status, open_settings

log = logging.getLogger("hugginggpt")

COMMANDS = (run, chat, store, catalog, discord, slack)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command."""
    parser = argparse.ArgumentParser(prog="hugginggpt", description="HuggingGPT chat bot: plan, select, execute, respond.")
    parser.add_argument("--config", help="TOML config file (default: $HUGGINGGPT_CONFIG or ./hugginggpt.toml)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log to stderr too (-vv: debug)")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


async def _main(args: argparse.Namespace) -> int:
    async with open_settings(args) as settings:
        return await args.handler(args, settings)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hugginggpt``. Returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_main(args)) or 0
    except HuggingGPTError as e:
        if logging.getLogger().handlers:  # not before logging is set up (stderr would say it twice)
            log.warning("%s: %s", e.__class__.__name__, e)
        print(f"Error: {e.user_message}", file=sys.stderr)
        return exit_status(e)
    except KeyboardInterrupt:
        print("\nInterrupted. Nothing was left half-written.", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
