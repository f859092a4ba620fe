"""The terminal front end: ``hugginggpt run`` and ``hugginggpt chat``.

:mod:`.chat` is the conversation loop, :mod:`.files` reads the files a user names, :mod:`.lines`
renders a run as lines, :mod:`.live` draws it on a terminal with :mod:`.images` for inline
pictures, and :mod:`.prompt` is the chat's line editor. :func:`terminal_renderer` picks the
renderer (importing :mod:`.live`, and rich, only for a terminal).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from .lines import TerminalRenderer

if TYPE_CHECKING:
    from .live import LiveRenderer


def terminal_renderer(answer: TextIO, progress: TextIO, env: Mapping[str, str]) -> LiveRenderer | TerminalRenderer:
    """The renderer for a command whose answer goes to ``answer`` and whose progress goes to
    ``progress``.

    Args:
        answer: the answer's stream (stdout).
        progress: the progress stream when ``answer`` is not a terminal (stderr for ``run``).
        env: the environment, to recognise the terminal's inline-image protocol
            (:func:`adapters.terminal.images.image_protocol`).

    Returns:
        :class:`adapters.terminal.live.LiveRenderer` when ``answer`` is a terminal (imported only
        then); else a :class:`adapters.terminal.lines.TerminalRenderer` writing progress to
        ``progress`` and the answer with its files alone to ``answer``.
    """
    if not answer.isatty():
        return TerminalRenderer(progress, answer=answer)
    from rich.console import Console

    from .images import image_protocol
    from .live import LiveRenderer

    return LiveRenderer(Console(file=answer), images=image_protocol(env), err=Console(file=sys.stderr))
