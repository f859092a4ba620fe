"""The terminal conversation (``hugginggpt chat``): each message one turn of the same conversation.

``/file PATH`` attaches a file to the next message, ``/files`` lists the conversation's files,
``/new`` starts a new conversation, ``/quit`` (or Ctrl-D) leaves; a stored conversation can be
resumed after a restart, with its history and files.

On a terminal the prompt edits lines, keeps a history across sessions in the data dir and takes
multi-line messages (keys: :mod:`adapters.terminal.prompt`); a run is drawn live with each task's
state and seconds, and the answer as Markdown (:mod:`adapters.terminal.live`). Ctrl-C at the
prompt clears the line; two within 2 seconds leave, so does Ctrl-D. Ctrl-C during a run stops that
run: tasks still running are cancelled, the answer covers what finished (written without the
controller), the turn is stored with it and the prompt comes back; a second Ctrl-C abandons the
run at once.

When stdin is not a terminal (a script, a test), messages are read as plain lines, one per turn.
"""


from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from bot.errors import unknown_conversation
from bot.incoming import Approve, ConversationKey, IncomingFile, Message, Requester
from pipeline.errors import HuggingGPTError

from . import on_ctrl_c
from .files import clean_text, read_user_file

if TYPE_CHECKING:  # rich is imported when a run is drawn on a terminal
    from bot.service import Service

    from .lines import TerminalRenderer
    from .live import LiveRenderer

    Renderer = LiveRenderer | TerminalRenderer

HELP = "Type a request. /file PATH attaches a file, /files lists files, /new starts over, /quit leaves."
COMMANDS = ("/file", "/files", "/new", "/quit", "/help")
HISTORY_FILE = "chat_history"
"""The prompt's history, in the data dir (``[storage] data_dir``)."""


def _new_key() -> ConversationKey:
    return ConversationKey("terminal", "local", "chat", secrets.token_hex(6))


class Reader(Protocol):
    """Where messages come from: ``read()`` is the next one, ``None`` at the end."""

    interrupted: bool
    notice: str | None

    async def read(self, prompt: str = "you> ") -> str | None: ...


class PlainReader:
    """Lines from a stdin that is not a terminal, without prompt or editing."""

    interrupted = False
    notice = None

    async def read(self, prompt: str = "you> ") -> str | None:
        def line() -> str | None:
            try:
                return input()
            except EOFError:
                return None

        return await asyncio.to_thread(line)


def _ctrl_c_stops(run: asyncio.Future, stop: asyncio.Event, renderer: Renderer) -> contextlib.AbstractContextManager[None]:
    """While a run is going on: the first Ctrl-C (SIGINT) sets ``stop`` (the answer covers what
    finished), the next one cancels ``run`` at once."""

    def on_sigint() -> None:
        if run.done():
            return
        if not stop.is_set():
            renderer.say("Stopping this run… (Ctrl-C again to abandon it at once)")
            stop.set()
        else:
            renderer.say("Abandoning this run…")
            run.cancel()

    return on_ctrl_c(on_sigint)


def _resume_listing(turns: list[dict[str, Any]]) -> list[str]:
    """Lines listing earlier turns: all of them up to five, else the first and the last three."""
    from .lines import printable

    def line(t: dict[str, Any]) -> str:
        return printable(f"  [{t['index']}] you: {t['user_text'][:80]}  ({t['status']})")

    if len(turns) <= 5:
        return [line(t) for t in turns]
    return [line(turns[0]), f"  … {len(turns) - 4} more", *(line(t) for t in turns[-3:])]


async def chat(service: Service, conversation: str | None, out: TextIO = sys.stdout,
               resume: str = "hugginggpt chat") -> bool:
    """Hold the conversation until the user leaves.

    Args:
        service: the started service (its settings give the data dir for the prompt's history).
        conversation: a stored conversation's id to resume, or ``None`` for a new one.
        out: where the chat writes (a terminal, or a plain stream for scripts).
        resume: the shell command that starts this chat again as the user started it; the
            hints append ``--conversation ID`` to it.

    Returns:
        ``True`` when the user left with two Ctrl-C at the prompt, ``False`` after ``/quit`` or Ctrl-D.

    Raises:
        InputError: ``conversation`` names no stored conversation.
    """
    key, conv = await _open(service, conversation, out)
    interactive = sys.stdin.isatty() and out.isatty()
    reader: Reader = PlainReader()
    if interactive:
        from .prompt import KEYS_HELP, ChatPrompt

        reader = ChatPrompt(service.settings.storage.data_dir / HISTORY_FILE, COMMANDS)
    print(f"Conversation {conv} (resume later with: {resume} --conversation {conv}). {HELP}", file=out)
    if interactive:
        print(KEYS_HELP, file=out)
        if reader.notice:
            print(reader.notice, file=out)
    from . import terminal_renderer

    renderer = terminal_renderer(out, out, os.environ)
    return await _loop(service, renderer, reader, key, conv, out, interactive, resume)


async def _open(service: Service, conversation: str | None, out: TextIO) -> tuple[ConversationKey, str]:
    if not conversation:
        key = _new_key()
        return key, await service.conversation_id(key)
    stored = await service.stored_conversation(conversation)
    if stored is None:
        raise unknown_conversation(conversation)
    print(f"Resuming conversation {conversation}: {len(stored.turns)} earlier turns, {len(stored.files)} files.",
          file=out)
    for listed in _resume_listing(stored.turns):
        print(listed, file=out)
    return stored.key, await service.conversation_id(stored.key)


async def _loop(service: Service, renderer: Renderer, reader: Reader, key: ConversationKey, conv: str, out: TextIO,
                interactive: bool, resume: str) -> bool:
    pending: list[IncomingFile] = []
    while True:
        line = await reader.read("you> ")
        if line is None:
            if interactive:
                print(f"Bye. Resume with: {resume} --conversation {conv}", file=out)
            return reader.interrupted
        line = clean_text(line).strip()
        if not line:
            continue
        if line in ("/quit", "/exit"):
            return False
        if line == "/new":
            left, key = conv, _new_key()
            conv = await service.conversation_id(key)
            pending.clear()
            print(f"New conversation {conv}. (Resume the previous one with: {resume} --conversation {left})", file=out)
        elif line == "/files":
            for r in await service.conversation_files(conv):
                from .lines import printable

                print(printable(f"  {r.id} ({r.kind}, {r.origin}): {r.description} — {r.path}"), file=out)
        elif line.startswith("/file ") or line == "/file":
            pending = await _attach(service, line[len("/file"):].strip(), pending, out)
        elif line.startswith("/"):
            print(HELP, file=out)
            if interactive:
                from .prompt import KEYS_HELP

                print(KEYS_HELP, file=out)
        else:
            await _turn(service, renderer, key, line, pending, out, interactive)
            pending = []


async def _attach(service: Service, path: str, pending: list[IncomingFile], out: TextIO) -> list[IncomingFile]:
    """``pending`` with the file at ``path`` added (checked now), or as it was after an error."""
    try:
        f = await read_user_file(path, service.settings)
        checked = await service.check_files([*pending, f])
    except HuggingGPTError as e:
        print(f"Error: {e.user_message}", file=out)
        return pending
    print(f"Attached {f.name} to your next message.", file=out)
    return checked


async def _turn(service: Service, renderer: Renderer, key: ConversationKey, text: str, files: list[IncomingFile],
                out: TextIO, interactive: bool, approve: Approve | None = None) -> None:
    """Run one turn, drawing it (:func:`adapters.turn.follow`, which says a refusal or a crash);
    Ctrl-C stops it (interactive only). A plan that waits for approval is asked y/N
    (:func:`adapters.terminal.ask_approval`; refused without a terminal) and run as the next turn."""
    from . import TerminalView, ask_approval

    stop = asyncio.Event()
    view = TerminalView(renderer, say_error=lambda sentence: print(f"Error: {sentence}", file=out))

    async def turn() -> None:
        from adapters.turn import follow

        message = Message(text, files, who=Requester("terminal", "terminal"), key=key, stop=stop, memoryless_fallback=True,
                          approve=approve)
        await follow(service.handle(message), view, where=f"chat {key.thread}")

    run = asyncio.ensure_future(turn())
    guard = _ctrl_c_stops(run, stop, renderer) if interactive else contextlib.nullcontext()
    quiet: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if interactive:
        from .prompt import quiet_typing

        quiet = quiet_typing(sys.stdin)
    with guard, quiet:
        try:
            await run
        except asyncio.CancelledError:
            if not run.cancelled():  # the chat itself is being cancelled
                raise
            renderer.close()
            print("Abandoned this run; files it made so far stay in the conversation.", file=out)
        finally:
            renderer.close()
    if view.waiting is not None:
        try:
            approved = await ask_approval(view.waiting, yes=False, stdin=sys.stdin, out=out)
        except HuggingGPTError as e:
            approved = False
            print(f"Error: {e.user_message}", file=out)
        if approved:
            await _turn(service, renderer, key, "", [], out, interactive, Approve(view.waiting.plan_id))
        else:
            with contextlib.suppress(HuggingGPTError):  # said above, or already gone: nothing to discard
                print(await service.cancel_plan(view.waiting.plan_id, None), file=out)
