"""Which terminal renderer a command gets: the live view on a terminal, plain lines otherwise.

Kept apart from both renderers so that a command whose output is redirected never imports rich.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from .terminal import TerminalRenderer

if TYPE_CHECKING:
    from .terminal_live import LiveRenderer


def terminal_renderer(answer: TextIO, progress: TextIO, env: Mapping[str, str]) -> LiveRenderer | TerminalRenderer:
    """The renderer for a command whose answer goes to ``answer`` and whose progress goes to
    ``progress``.

    Args:
        answer: the answer's stream (stdout).
        progress: the progress stream when ``answer`` is not a terminal (stderr for ``run``).
        env: the environment, to recognise the terminal's inline-image protocol
            (:func:`adapters.terminal_images.image_protocol`).

    Returns:
        :class:`adapters.terminal_live.LiveRenderer` when ``answer`` is a terminal (imported only
        then); else a :class:`adapters.terminal.TerminalRenderer` writing progress to
        ``progress`` and the answer with its files alone to ``answer``.
    """
    if not answer.isatty():
        return TerminalRenderer(progress, answer=answer)
    from rich.console import Console

    from .terminal_images import image_protocol
    from .terminal_live import LiveRenderer

    return LiveRenderer(Console(file=answer), images=image_protocol(env), err=Console(file=sys.stderr))
