"""Reading the user's messages in ``hugginggpt chat`` on a terminal (prompt_toolkit).

Keys (Emacs-style line editing, prompt_toolkit's defaults, plus these):

* Enter sends the message; Alt-Enter, or Esc then Enter, starts a new line in it (a pasted text
  keeps its lines and is not sent until Enter: bracketed paste);
* Up / Down recall earlier messages, from this and earlier sessions (a history file in the data
  dir, readable by its owner only); Ctrl-R searches them; a grey suggestion from history is taken
  with the Right arrow;
* Tab completes the slash commands, and file paths after ``/file``;
* Ctrl-C clears the line; a second Ctrl-C on the empty line within :data:`QUIT_WINDOW` seconds,
  or Ctrl-D on an empty line, leaves (a Ctrl-C that clears a draft, or one before the last
  message was sent, never leaves).

While a run is going on the terminal is not in prompt_toolkit's hands: Ctrl-C arrives as SIGINT
(the chat stops the run) and :func:`quiet_typing` keeps typed keys from being echoed into the live
view (they are not lost: the next prompt reads them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import termios
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

log = logging.getLogger(__name__)

QUIT_WINDOW = 2.0
"""Seconds within which a second Ctrl-C at the prompt leaves the chat."""
KEYS_HELP = ("Enter sends; Alt-Enter (or Esc, Enter) adds a line; Up/Down recall earlier messages; "
             "Ctrl-C clears the line or stops a run; Ctrl-C twice within 2 s, or Ctrl-D, leaves.")
CLEARED = "(Line cleared. Ctrl-C again within 2 s, or Ctrl-D, leaves.)"


class SlashCompleter(Completer):
    """Completes ``/commands`` at the start of the line, and a path after ``/file ``.

    Args:
        commands: the slash commands, e.g. ``["/file", "/files", "/new", "/quit"]``.
    """

    def __init__(self, commands: Sequence[str]) -> None:
        self.commands = list(commands)
        self._paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event: CompleteEvent):  # type: ignore[override]
        text = document.text_before_cursor
        if text.startswith("/file "):
            rest = text[len("/file "):]
            yield from self._paths.get_completions(Document(rest, len(rest)), complete_event)
        elif text.startswith("/") and " " not in text:
            for c in self.commands:
                if c.startswith(text):
                    yield Completion(c, start_position=-len(text))


def _private_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    os.close(fd)


class ChatPrompt:
    """The chat's prompt (see the module docstring).

    Args:
        history_file: where messages are kept across sessions (created, mode 0600).
        commands: slash commands to complete.
        clock: ``time.monotonic``-like seconds (for the two-Ctrl-C window).
    """

    def __init__(self, history_file: Path, commands: Sequence[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.notice: str | None = None
        """A sentence for the user when the history cannot be kept (the chat works without it)."""
        history: History
        try:
            _private_file(history_file)
            history = FileHistory(str(history_file))
        except OSError as e:
            log.warning("cannot keep the chat history in %s: %s", history_file, e)
            self.notice = f"(Earlier messages are not kept: {history_file} cannot be written, {e.strerror or e}.)"
            history = InMemoryHistory()
        self.clock = clock
        self._last_interrupt = float("-inf")
        self.session: PromptSession[str] = PromptSession(
            history=history, key_bindings=self._bindings(), multiline=False,
            auto_suggest=AutoSuggestFromHistory(), completer=SlashCompleter(commands),
            complete_while_typing=False, prompt_continuation="...  ", enable_history_search=False,
        )

    def _bindings(self) -> KeyBindings:
        kb = KeyBindings()

        @kb.add("escape", "enter")  # Alt-Enter sends Esc, CR in most terminals
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @kb.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            now = self.clock()
            if not event.current_buffer.text and now - self._last_interrupt <= QUIT_WINDOW:
                event.app.exit(exception=KeyboardInterrupt(), style="class:aborting")
                return
            self._last_interrupt = now
            event.current_buffer.reset()
            run_in_terminal(lambda: print(CLEARED, flush=True))

        return kb

    async def read(self, prompt: str = "you> ") -> str | None:
        """The next message, or ``None`` when the user leaves (Ctrl-D on an empty line, or two
        Ctrl-C within :data:`QUIT_WINDOW` seconds; :attr:`interrupted` tells which)."""
        self.interrupted = False
        self._last_interrupt = float("-inf")  # a Ctrl-C before the last message does not count
        try:
            return await self.session.prompt_async(prompt)
        except EOFError:
            return None
        except KeyboardInterrupt:
            self.interrupted = True
            return None

    interrupted: bool = False
    """Whether the last :meth:`read` ended with two Ctrl-C (exit status 130) rather than Ctrl-D."""


@contextlib.contextmanager
def quiet_typing(stream: object = sys.stdin) -> Iterator[None]:
    """While active, keys typed on the terminal ``stream`` are not echoed (the line discipline
    keeps them for the next prompt); Ctrl-C still sends SIGINT. Does nothing if ``stream`` is not
    a terminal."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        before = termios.tcgetattr(fd)
    except (AttributeError, OSError, ValueError, termios.error):
        yield
        return
    quiet = list(before)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, before)
