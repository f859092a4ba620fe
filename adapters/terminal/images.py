"""Images inline in the terminal, where the terminal can show them.

Three protocols, chosen from the environment (no query is sent to the terminal: a reply could
land in the user's input):

* ``kitty``: the kitty graphics protocol (sw.kovidgoyal.net/kitty/graphics-protocol/): an APC
  escape ``ESC _ G f=100,a=T,m=0|1 ; <base64 PNG> ESC \\``, the data cut into chunks of at most
  4096 bytes. kitty (``KITTY_WINDOW_ID``, ``TERM=xterm-kitty``) and Ghostty (``TERM_PROGRAM``)
  speak it.
* ``iterm``: iTerm2's inline images (iterm2.com/documentation-images.html): an OSC escape
  ``ESC ] 1337 ; File=inline=1;size=N:<base64> BEL``. iTerm2 and WezTerm (``TERM_PROGRAM``).
* ``sixel``: DEC sixel graphics (VT330/340 manual, "Sixel Graphics"), for terminals whose
  ``TERM`` names sixel support (``foot``, ``mlterm``, ``yaft``, ``*-sixel``).

Inside tmux or GNU screen (``TMUX``, ``STY``), or anywhere else, nothing is drawn: the caller
shows the file's path, as it always does too.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from pipeline.tasks.drawing import to_png

log = logging.getLogger(__name__)

Protocol = Literal["kitty", "iterm", "sixel"]

MAX_WIDTH = 480
"""Pixels, widest image drawn (larger ones are scaled down, keeping their aspect)."""
MAX_HEIGHT = 320
"""Pixels, tallest image drawn."""
_SIXEL_COLOURS = 64
_SIXEL_TERMS = ("foot", "foot-extra", "mlterm", "yaft-256color", "contour")


def image_protocol(env: Mapping[str, str]) -> Protocol | None:
    """The inline-image protocol the terminal described by ``env`` (``TERM``, ``TERM_PROGRAM``,
    ``KITTY_WINDOW_ID``, ``TMUX``, ``STY``) understands, or ``None`` (show paths only)."""
    if env.get("TMUX") or env.get("STY"):
        return None
    term = env.get("TERM", "").lower()
    program = env.get("TERM_PROGRAM", "").lower()
    if env.get("KITTY_WINDOW_ID") or term == "xterm-kitty" or program == "ghostty" or term == "xterm-ghostty":
        return "kitty"
    if program in ("iterm.app", "wezterm"):
        return "iterm"
    if term in _SIXEL_TERMS or "sixel" in term:
        return "sixel"
    return None


def _thumbnail(path: Path) -> Image.Image:
    with Image.open(path) as im:
        im.draft("RGB", (MAX_WIDTH, MAX_HEIGHT))  # JPEG: decode at a reduced scale
        out = im.convert("RGBA" if im.mode in ("RGBA", "LA", "P") else "RGB")
    out.thumbnail((MAX_WIDTH, MAX_HEIGHT))
    return out


def kitty_sequence(png: bytes) -> str:
    """The kitty graphics escape that draws ``png`` (PNG bytes) at the cursor and moves the
    cursor below it; base64 payload in chunks of 4096 bytes (``m=1`` on all but the last)."""
    data = base64.standard_b64encode(png).decode("ascii")
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)] or [""]
    parts = []
    for i, chunk in enumerate(chunks):
        more = 1 if i < len(chunks) - 1 else 0
        head = f"f=100,a=T,q=2,m={more}" if i == 0 else f"m={more}"
        parts.append(f"\x1b_G{head};{chunk}\x1b\\")
    return "".join(parts)


def iterm_sequence(png: bytes, name: str = "image.png") -> str:
    """iTerm2's inline-image escape for ``png`` (PNG bytes)."""
    b64name = base64.b64encode(name.encode("utf-8")).decode("ascii")
    data = base64.b64encode(png).decode("ascii")
    return f"\x1b]1337;File=name={b64name};inline=1;size={len(png)};preserveAspectRatio=1:{data}\x07"


def _sixel_rle(row: np.ndarray) -> str:
    """Sixel characters (a ``uint8`` array of 63..126) with runs of more than three written as
    ``!<count><char>``; trailing empty sixels (``?``) dropped."""
    used = np.flatnonzero(row != 63)
    if used.size == 0:
        return ""
    row = row[: used[-1] + 1]
    edges = np.flatnonzero(np.diff(row)) + 1
    out = []
    for start, end in zip([0, *edges.tolist()], [*edges.tolist(), len(row)]):
        ch, n = chr(row[start]), end - start
        out.append(f"!{n}{ch}" if n > 3 else ch * n)
    return "".join(out)


def sixel_sequence(image: Image.Image) -> str:
    """The DEC sixel escape (``ESC P q … ESC \\``) for ``image``, quantised to 64 colours;
    each band of six pixel rows is drawn once per colour present in it, run-length encoded."""
    q = image.convert("RGB").quantize(colors=_SIXEL_COLOURS, method=Image.Quantize.FASTOCTREE)
    w, h = q.size
    pal = (q.getpalette() or [])[: 3 * _SIXEL_COLOURS]
    out = ["\x1bPq", f'"1;1;{w};{h}']
    for c in range(len(pal) // 3):
        r, g, b = (v * 100 // 255 for v in pal[3 * c : 3 * c + 3])
        out.append(f"#{c};2;{r};{g};{b}")
    index = np.asarray(q, dtype=np.uint8).reshape(h, w)
    if h % 6:  # pad the last band with a colour no pixel has
        index = np.vstack([index, np.full((6 - h % 6, w), 255, np.uint8)])
    weights = (1 << np.arange(6, dtype=np.uint16)).reshape(6, 1)
    for top in range(0, h, 6):
        band = index[top : top + 6]
        rows = []
        for c in np.unique(band).tolist():
            if c != 255:
                bits = ((band == c) * weights).sum(axis=0) + 63
                rows.append(f"#{c}" + _sixel_rle(bits.astype(np.uint8)))
        out.append("$".join(rows) + "-")
    out.append("\x1b\\")
    return "".join(out)


def inline_image(path: Path, protocol: Protocol) -> str | None:
    """The escape sequence drawing the image at ``path`` (scaled to at most
    :data:`MAX_WIDTH` × :data:`MAX_HEIGHT` pixels) with ``protocol``, or ``None`` when the file
    cannot be read as an image (logged; the caller shows the path anyway)."""
    try:
        image = _thumbnail(path)
        if protocol == "sixel":
            return sixel_sequence(image)
        png = to_png(image)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        log.warning("cannot draw %s inline: %s", path, e)
        return None
    return kitty_sequence(png) if protocol == "kitty" else iterm_sequence(png, path.name)
