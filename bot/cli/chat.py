"""``hugginggpt chat``: a multi-turn conversation in the terminal.

In a chat, each line is one turn of the same conversation; ``/file PATH`` attaches a file to the
next message, ``/files`` lists the conversation's files, ``/new`` starts a new conversation,
``/quit`` (or end of input) leaves. ``--conversation ID`` resumes a stored conversation after a
restart, with its history and files.

In a terminal, Ctrl-C at the prompt clears the line (a second Ctrl-C in a row leaves, status 130).
Ctrl-C during a run stops that run: tasks still running are cancelled, the answer covers what
finished (written without the controller), the turn is stored with it and the prompt comes back; a
second Ctrl-C abandons the run at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from adapters.terminal import TerminalRenderer, printable
from pipeline.errors import HuggingGPTError

from ..errors import InputError
from ..incoming import ConversationKey, IncomingFile
from ..service import Service
from ..settings import Settings
from .common import INTERRUPTED, add_sandbox_option, clean_text, read_user_file

HELP = "Type a request. /file PATH attaches a file, /files lists files, /new starts over, /quit leaves."


def add_parser(subparsers: Any) -> None:
    """Add ``chat`` to the command line's subparsers."""
    p = subparsers.add_parser("chat", help="a multi-turn conversation in the terminal")
    p.add_argument("--conversation", metavar="ID", help="resume a stored conversation")
    add_sandbox_option(p)
    p.set_defaults(handler=main)


def _new_key() -> ConversationKey:
    return ConversationKey("terminal", "local", "chat", secrets.token_hex(6))


class Interrupts:
    """Ctrl-C in an interactive chat: stops the run in progress, or clears the prompt (twice in a
    row at the prompt: leave). Without a terminal, Ctrl-C keeps its usual meaning."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.run: asyncio.Task | None = None
        self.stop: asyncio.Event | None = None
        self.prompt: asyncio.Future | None = None
        self.at_prompt_count = 0
        self.quit = False

    @contextlib.contextmanager
    def installed(self) -> Any:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals
            yield self
            return
        try:
            yield self
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    def _on_sigint(self) -> None:
        if self.run is not None and not self.run.done():
            if self.stop is not None and not self.stop.is_set():
                print("\nStopping this run… (Ctrl-C again to abandon it at once)", file=self.out, flush=True)
                self.stop.set()
            else:
                print("\nAbandoning this run…", file=self.out, flush=True)
                self.run.cancel()
            return
        self.at_prompt_count += 1
        if self.at_prompt_count >= 2:
            self.quit = True
            if self.prompt is not None and not self.prompt.done():
                self.prompt.set_result(None)
            return
        print("\n(Line cleared. Press Ctrl-C again to leave.)\nyou> ", end="", file=self.out, flush=True)


async def _read_tty_line(prompt: str, out: TextIO, interrupts: Interrupts) -> str | None:
    """One line from the terminal without a thread, so Ctrl-C is seen at once (the terminal's
    line discipline drops the half-typed line on Ctrl-C)."""
    loop = asyncio.get_running_loop()
    print(prompt, end="", file=out, flush=True)
    fut: asyncio.Future = loop.create_future()
    interrupts.prompt = fut
    fd = sys.stdin.fileno()

    def ready() -> None:
        if not fut.done():
            fut.set_result(sys.stdin.readline())

    loop.add_reader(fd, ready)
    try:
        line = await fut
    finally:
        loop.remove_reader(fd)
        interrupts.prompt = None
    if line is None or line == "":
        return None
    interrupts.at_prompt_count = 0
    return line.rstrip("\n")


async def _read_line(prompt: str) -> str | None:
    def read() -> str | None:
        try:
            return input(prompt)
        except EOFError:
            return None

    return await asyncio.to_thread(read)


def _resume_listing(turns: list[dict[str, Any]]) -> list[str]:
    """Lines listing earlier turns: all of them up to five, else the first and the last three."""
    def line(t: dict[str, Any]) -> str:
        return printable(f"  [{t['index']}] you: {t['user_text'][:80]}  ({t['status']})")

    if len(turns) <= 5:
        return [line(t) for t in turns]
    return [line(turns[0]), f"  … {len(turns) - 4} more", *(line(t) for t in turns[-3:])]


async def _events(service: Service, line: str, files: list[IncomingFile], key: ConversationKey,
                  stop: asyncio.Event | None = None) -> AsyncIterator[Any]:
    async for event in service.handle(line, files, key=key, user="terminal", stop=stop):
        yield event


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
            for listed in _resume_listing(turns):
                print(listed, file=out)
        else:
            key = _new_key()
        conv = await service.conversation_id(key)
        print(f"Conversation {conv} (resume later with: hugginggpt chat --conversation {conv}). {HELP}", file=out)
        renderer = TerminalRenderer(out)
        interactive = sys.stdin.isatty() and out.isatty()
        with Interrupts(out).installed() if interactive else contextlib.nullcontext(None) as interrupts:
            return await _Chat(service, renderer, key, conv, out, interrupts).loop()
    finally:
        await service.close()


@dataclass
class _Chat:
    """The conversation loop's state: the current conversation and the files for the next message."""

    service: Service
    renderer: TerminalRenderer
    key: ConversationKey
    conv: str
    out: TextIO
    interrupts: Interrupts | None
    pending: list[IncomingFile] = field(default_factory=list)

    async def loop(self) -> int:
        """Read lines until the user leaves; returns the exit status (0, or 130 after Ctrl-C twice)."""
        while True:
            if self.interrupts is not None:
                line = await _read_tty_line("you> ", self.out, self.interrupts)
                if self.interrupts.quit:
                    print(f"\nBye. Resume with: hugginggpt chat --conversation {self.conv}", file=self.out)
                    return INTERRUPTED
            else:
                line = await _read_line("")
            if line is None:
                return 0
            line = clean_text(line).strip()
            if line in ("/quit", "/exit"):
                return 0
            if line.startswith("/"):
                await self.command(line)
            elif line:
                await self.turn(line)

    async def command(self, line: str) -> None:
        """``/new``, ``/files``, ``/file PATH``; anything else shows the help."""
        out = self.out
        if line == "/new":
            left = self.conv
            self.key = _new_key()
            self.conv = await self.service.conversation_id(self.key)
            self.pending.clear()
            print(f"New conversation {self.conv}. (Resume the previous one with: hugginggpt chat --conversation {left})",
                  file=out)
        elif line == "/files":
            for r in await self.service.store.resources(self.conv):
                print(printable(f"  {r.id} ({r.kind}, {r.origin}): {r.description} — {r.path}"), file=out)
        elif line.startswith("/file"):
            path = line[len("/file") :].strip()
            try:
                f = read_user_file(path)
                self.pending = await self.service.check_files([*self.pending, f])
            except HuggingGPTError as e:
                print(f"Error: {e.user_message}", file=out)
                return
            print(f"Attached {f.name} to your next message.", file=out)
        else:
            print(HELP, file=out)

    async def turn(self, text: str) -> None:
        """One turn with the files attached so far; Ctrl-C stops (then abandons) it."""
        stop = asyncio.Event()
        files, self.pending = list(self.pending), []

        async def render() -> None:
            async for event in _events(self.service, text, files, self.key, stop):
                self.renderer.render(event)

        run = asyncio.ensure_future(render())
        if self.interrupts is not None:
            self.interrupts.run, self.interrupts.stop = run, stop
        try:
            await run
        except asyncio.CancelledError:
            if not run.cancelled():  # the chat itself is being cancelled
                raise
            print("Abandoned this run; files it made so far stay in the conversation.", file=self.out)
        except HuggingGPTError as e:
            print(f"Error: {e.user_message}", file=self.out)
        finally:
            if self.interrupts is not None:
                self.interrupts.run = self.interrupts.stop = None
