"""``hugginggpt chat [--conversation ID] [--sandbox]``: a multi-turn conversation in the terminal
(the front end is :mod:`adapters.terminal.chat`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from .common import INTERRUPTED, add_sandbox_option, command_hint

if TYPE_CHECKING:
    from bot.settings import Settings


def add_parser(subparsers: Any) -> None:
    """Add ``chat`` to the command line's subparsers."""
    p = subparsers.add_parser("chat", help="a multi-turn conversation in the terminal")
    p.add_argument("--conversation", metavar="ID", help="resume a stored conversation")
    add_sandbox_option(p)
    p.set_defaults(handler=main)


async def main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """Hold the conversation. Returns the exit status (0 when the user leaves with ``/quit`` or
    Ctrl-D, 130 after two Ctrl-C at the prompt).

    Raises:
        InputError: ``--conversation`` names no stored conversation.
    """
    from adapters.terminal.chat import chat  # prompt_toolkit, rich and the pipeline load when a chat starts
    from bot.service import Service

    service = await Service.create(settings)
    try:
        return INTERRUPTED if await chat(service, args.conversation, out, resume=command_hint(args, "chat")) else 0
    finally:
        await service.close()
