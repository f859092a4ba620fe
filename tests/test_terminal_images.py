"""Images drawn inline in the terminal: which protocol each terminal gets (from its environment),
and escape sequences that decode back to the picture (kitty graphics protocol, iTerm2 inline
images, DEC sixel), from the real photos in the fixtures."""

from __future__ import annotations

import base64
import io
import math
import re
from pathlib import Path

import pytest
from PIL import Image

from adapters.terminal.images import MAX_HEIGHT, MAX_WIDTH, image_protocol, inline_image

MEDIA = Path(__file__).parent / "fixtures" / "media"


@pytest.mark.parametrize("env, expected", [
    ({"TERM": "xterm-kitty", "KITTY_WINDOW_ID": "1"}, "kitty"),
    ({"TERM": "xterm-256color", "KITTY_WINDOW_ID": "3"}, "kitty"),
    ({"TERM": "xterm-ghostty", "TERM_PROGRAM": "ghostty"}, "kitty"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "iTerm.app"}, "iterm"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"}, "iterm"),
    ({"TERM": "foot"}, "sixel"),
    ({"TERM": "mlterm"}, "sixel"),
    ({"TERM": "xterm-256color"}, None),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "Apple_Terminal"}, None),
    ({"TERM": "dumb"}, None),
    ({}, None),
    ({"TERM": "tmux-256color", "TERM_PROGRAM": "iTerm.app", "TMUX": "/tmp/tmux-0/default,1,0"}, None),
    ({"TERM": "xterm-kitty", "KITTY_WINDOW_ID": "1", "STY": "123.pts-0"}, None),
])
def test_the_protocol_comes_from_the_terminal_environment(env, expected):
    assert image_protocol(env) == expected


def test_kitty_sequence_carries_the_photo_in_chunks():
    seq = inline_image(MEDIA / "chelsea.png", "kitty")
    chunks = re.findall(r"\x1b_G([^;]*);([^\x1b]*)\x1b\\", seq)
    assert "".join(f"\x1b_G{c};{d}\x1b\\" for c, d in chunks) == seq
    assert chunks[0][0].startswith("f=100,a=T") and chunks[-1][0].endswith("m=0")
    assert all(c.endswith("m=1") for c, _ in chunks[:-1]) and all(len(d) <= 4096 for _, d in chunks)
    image = Image.open(io.BytesIO(base64.b64decode("".join(d for _, d in chunks))))
    assert image.format == "PNG" and image.size == (451, 300)  # small enough to be sent as it is


def test_iterm_sequence_carries_a_scaled_down_photo():
    big = [p for p in MEDIA.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png")]
    path = max(big, key=lambda p: Image.open(p).size[0])
    w, h = Image.open(path).size
    seq = inline_image(path, "iterm")
    m = re.fullmatch(r"\x1b\]1337;File=name=([^;]+);inline=1;size=(\d+);preserveAspectRatio=1:([A-Za-z0-9+/=]+)\x07", seq)
    assert m and base64.b64decode(m.group(1)).decode() == path.name
    data = base64.b64decode(m.group(3))
    assert len(data) == int(m.group(2))
    shown = Image.open(io.BytesIO(data)).size
    assert shown[0] <= MAX_WIDTH and shown[1] <= MAX_HEIGHT
    assert abs(shown[0] / shown[1] - w / h) < 0.05  # the aspect is kept


def test_sixel_sequence_has_a_band_per_six_rows_and_a_palette():
    seq = inline_image(MEDIA / "chelsea.png", "sixel")
    assert seq.startswith('\x1bPq"1;1;451;300') and seq.endswith("\x1b\\")
    assert seq.count("-") == math.ceil(300 / 6)
    colours = re.findall(r"#(\d+);2;(\d+);(\d+);(\d+)", seq)
    assert 2 <= len(colours) <= 64 and all(0 <= int(v) <= 100 for c in colours for v in c[1:])
    body = seq[seq.index('"1;1;451;300') + len('"1;1;451;300'):-2]
    assert re.fullmatch(r"(#\d+(;2;\d+;\d+;\d+)?|[?-~]|!\d+[?-~]|\$|-)*", body)  # only sixel syntax


def test_a_file_that_is_not_an_image_draws_nothing(tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    assert inline_image(bad, "kitty") is None
