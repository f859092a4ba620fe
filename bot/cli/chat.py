"""``hugginggpt chat``: a multi-turn conversation in the terminal.

In a chat, each line is one turn of the same conversation; ``/file PATH`` attaches a file to the
next message, ``/files`` lists the conversation's files, ``/new`` starts a new conversation,
``/quit`` (or end of input) leaves. ``--conversation ID`` resumes a stored conversation after a
restart, with its history and files.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from typing import Any, TextIO

from adapters.terminal import TerminalRenderer
from pipeline.errors import HuggingGPTError

from ..errors import InputError
from ..incoming import ConversationKey, IncomingFile
from ..service import Service
from ..settings import Settings
from .common import add_sandbox_option, clean_text, read_user_file

HELP = "Type a request. /file PATH attaches a file, /files lists files, /new starts over, /quit leaves."


def add_parser(subparsers: Any) -> None:
    """Add ``chat`` to the command line's subparsers."""
    p = subparsers.add_parser("chat", help="a multi-turn conversation in the terminal")
    p.add_argument("--conversation", metavar="ID", help="resume a stored conversation")
    add_sandbox_option(p)
    p.set_defaults(handler=main)


def _new_key() -> ConversationKey:
    return ConversationKey("terminal", "local", "chat", secrets.token_hex(6))


async def _read_line(prompt: str) -> str | None:
    def read() -> str | None:
        try:
            return input(prompt)
        except EOFError:
            return None

    return await asyncio.to_thread(read)


async def main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """The terminal conversation loop. Returns the exit status (0 when the user leaves)."""

    service = await Service.create(settings)
    try:
        if args.conversation:
            key = await service.store.find(args.conversation)
            if key is None:
                raise InputError(f"There is no conversation {args.conversation}.")
            turns = await service.store.turns(args.conversation)
            files = await service.store.resources(args.conversation)
            print(f"Resuming conversation {args.conversation}: {len(turns)} earlier turns, {len(files)} files.", file=out)
            for t in turns[-3:]:
                print(f"  [{t['index']}] you: {t['user_text'][:80]}  ({t['status']})", file=out)
        else:
            key = _new_key()
        conv = await service.conversation_id(key)
        print(f"Conversation {conv} (resume later with: hugginggpt chat --conversation {conv}). {HELP}", file=out)
        renderer = TerminalRenderer(out)
        pending: list[IncomingFile] = []
        while True:
            line = await _read_line("you> " if out.isatty() else "")
            if line is None:
                return 0
            line = clean_text(line).strip()
            if not line:
                continue
            if line in ("/quit", "/exit"):
                return 0
            if line == "/new":
                key = _new_key()
                conv = await service.conversation_id(key)
                pending.clear()
                print(f"New conversation {conv}.", file=out)
                continue
            if line == "/files":
                for r in await service.store.resources(conv):
                    print(f"  {r.id} ({r.kind}, {r.origin}): {r.description} — {r.path}", file=out)
                continue
            if line.startswith("/file"):
                path = line[len("/file") :].strip()
                try:
                    f = read_user_file(path)
                    pending = await service.check_files([*pending, f])
                except HuggingGPTError as e:
                    print(f"Error: {e.user_message}", file=out)
                    continue
                print(f"Attached {f.name} to your next message.", file=out)
                continue
            if line.startswith("/"):
                print(HELP, file=out)
                continue
            try:
                async for event in service.handle(line, pending, key=key, user="terminal"):
                    renderer.render(event)
            except HuggingGPTError as e:
                print(f"Error: {e.user_message}", file=out)
            pending = []
    finally:
        await service.close()
