"""``hugginggpt chat`` (a terminal conversation) and ``hugginggpt store prune|forget``.

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
from pipeline.errors import HuggingGPTError, InputError
from pipeline.media import MediaStore

from .config import Settings
from .service import ConversationKey, IncomingFile, Service
from .store import SQLiteStore

HELP = "Type a request. /file PATH attaches a file, /files lists files, /new starts over, /quit leaves."


def add_parser(subparsers: Any) -> None:
    """Add the ``chat`` and ``store`` subcommands."""
    chat = subparsers.add_parser("chat", help="a multi-turn conversation in the terminal")
    chat.add_argument("--conversation", metavar="ID", help="resume a stored conversation")
    chat.add_argument("--sandbox", action="store_true", help="use in-process stand-in backends")
    store = subparsers.add_parser("store", help="conversation storage maintenance")
    ssub = store.add_subparsers(dest="store_command", required=True)
    prune = ssub.add_parser("prune", help="apply the retention settings ([storage] max_age_days, max_media_bytes)")
    prune.add_argument("--max-age-days", type=float, help="override [storage] max_age_days")
    prune.add_argument("--max-media-mb", type=float, help="override [storage] max_media_bytes, in MiB")
    forget = ssub.add_parser("forget", help="delete one conversation and its files")
    forget.add_argument("id", help="conversation id")


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``chat`` or ``store``. Returns the exit status."""
    if args.command == "store":
        return await store_main(args, settings)
    return await chat_main(args, settings)


async def store_main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """``store prune`` / ``store forget ID``.

    Raises:
        StorageError: the database is unusable.
        InputError: unknown conversation id (forget).
    """
    async with SQLiteStore(settings.storage.data_dir, MediaStore(settings.storage.data_dir)) as store:
        if args.store_command == "forget":
            if not await store.forget(args.id):
                raise InputError(f"There is no conversation {args.id}.")
            print(f"Deleted conversation {args.id} and its files.", file=out)
            return 0
        age = args.max_age_days if args.max_age_days is not None else settings.storage.max_age_days
        size = int(args.max_media_mb * 1024 * 1024) if args.max_media_mb is not None else settings.storage.max_media_bytes
        if age is None and size is None:
            raise InputError("Nothing to prune: set [storage] max_age_days or max_media_bytes, or pass --max-age-days / --max-media-mb.")
        report = await store.prune(max_age_days=age, max_media_bytes=size)
        print(
            f"Removed {report.conversations} conversations and {report.files} files "
            f"({report.bytes_freed / 1024 / 1024:.1f} MiB); media now {report.media_bytes / 1024 / 1024:.1f} MiB.",
            file=out,
        )
        return 0


def _new_key() -> ConversationKey:
    return ConversationKey("terminal", "local", "chat", secrets.token_hex(6))


async def _read_line(prompt: str) -> str | None:
    def read() -> str | None:
        try:
            return input(prompt)
        except EOFError:
            return None

    return await asyncio.to_thread(read)


async def chat_main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """The terminal conversation loop."""
    from .cli import read_user_file

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
            line = line.strip()
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
                    await service.check_files([*pending, f])
                except HuggingGPTError as e:
                    print(f"Error: {e.user_message}", file=out)
                    continue
                pending.append(f)
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
