"""Cutting answers into messages that fit a platform's size limit, for every front end.

Code blocks are never left open: a block that must be split is closed at the end of one message
and reopened at the start of the next. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def utf8_len(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes (how Slack measures a message)."""
    return len(text.encode("utf-8"))


def _fit(text: str, limit: int, size: Callable[[str], int]) -> int:
    """The longest prefix of ``text`` (in characters) whose ``size`` is at most ``limit``."""
    if size is len:
        return min(limit, len(text))
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _split_words(text: str, limit: int, size: Callable[[str], int]) -> list[str]:
    """Split one line into pieces of at most ``limit`` (measured by ``size``) at spaces; a word
    longer than ``limit`` (a URL, a hash) is cut, as nothing else can make it fit."""
    pieces: list[str] = []
    while size(text) > limit:
        n = max(1, _fit(text, limit, size))
        cut = text.rfind(" ", 0, n + 1)
        if cut <= 0:
            pieces.append(text[:n])
            text = text[n:]
        else:
            pieces.append(text[:cut])
            text = text[cut + 1 :]
    pieces.append(text)
    return pieces


def split_text(text: str, limit: int, *, size: Callable[[str], int] = len, reopen_language: bool = True) -> list[str]:
    """Split an answer into messages of at most ``limit`` (as measured by ``size``).

    Rules: break between lines, preferring a blank line or the start of a code block once a
    message is at least half full; a line longer than a message is broken at a space (only a
    single word longer than the limit is cut inside). A code block (```` ``` ```` or ``~~~``
    fence) that must be split is closed at the end of one message and reopened, with its
    language tag (unless ``reopen_language`` is off: Slack's mrkdwn has no language tags), at the
    start of the next, so every message renders on its own.

    Args:
        text: Markdown (or Slack mrkdwn) text.
        limit: maximum size per message, at least 40 (Discord: 2000 characters, "Create
            Message"; Slack: 3500 UTF-8 bytes, below ``msg_too_long``).
        size: how a text is measured: ``len`` (characters) or :func:`utf8_len` (bytes).
        reopen_language: reopen a split code block with its language tag.

    Returns:
        Non-empty messages in order (``[]`` for blank text).

    Raises:
        ValueError: ``limit`` below 40.
    """
    if limit < 40:
        raise ValueError("limit must be at least 40")
    text = text.strip("\n")
    if not text.strip():
        return []
    splitter = _Splitter(limit, size, reopen_language)
    for raw in text.split("\n"):
        splitter.add_line(raw)
    splitter.emit(len(splitter.cur), splitter.fence)
    return splitter.chunks


class _Splitter:
    """The state of :func:`split_text` while it reads the text line by line."""

    def __init__(self, limit: int, size: Callable[[str], int], reopen_language: bool) -> None:
        self.limit, self.size, self.reopen_language = limit, size, reopen_language
        self.chunks: list[str] = []
        self.cur: list[str] = []
        self.cur_len = 0  # size("\n".join(cur))
        self.fence: str | None = None  # opening line of the code block we are inside
        self.soft: int | None = None  # index into cur where a split is pleasant (outside code)

    def closer(self, fence: str | None) -> int:
        """Size of the line that closes ``fence`` (0 outside a code block)."""
        return self.size(_fence_chars(fence)) + 1 if fence else 0

    @staticmethod
    def has_content(lines: list[str]) -> bool:
        """A bare fence is markup; a fence with an info string ("```py") is the user's text too."""
        return any(ln.strip() and not (_FENCE.match(ln) and not ln.strip().strip("`~")) for ln in lines)

    def emit(self, upto: int, open_fence: str | None) -> None:
        """End a message with the first ``upto`` lines (closing ``open_fence`` when the message
        ends inside it, and reopening it in the next)."""
        cur = self.cur
        head, rest = cur[:upto], cur[upto:]
        body = "\n".join(head).strip("\n")
        if open_fence is not None and upto == len(cur):
            body += "\n" + _fence_chars(open_fence)
        if self.has_content(head):
            self.chunks.append(body)
        if upto == len(cur):
            if open_fence is not None:
                rest = [open_fence if self.reopen_language else _fence_chars(open_fence)]
            else:
                rest = []
        while rest and not rest[0].strip():
            rest = rest[1:]
        self.cur = rest
        self.cur_len = self.size("\n".join(rest))
        self.soft = None

    def _fence_after(self, raw: str, is_fence: bool) -> str | None:
        """The code block we are inside after line ``raw`` (a fence opens or closes one)."""
        fence = self.fence
        if is_fence and fence is None:
            if self.cur and self.has_content(self.cur):
                self.soft = len(self.cur)
            return raw.strip()
        if is_fence and fence is not None and raw.strip().strip("`~") == "" and raw.strip()[0] == fence[0] \
                and len(raw.strip()) >= len(_fence_chars(fence)):
            return None
        return fence

    def add_line(self, raw: str) -> None:
        """Add one line of the text, ending messages before it as the limit needs."""
        size, limit, fence = self.size, self.limit, self.fence
        is_fence = _FENCE.match(raw) is not None
        after = self._fence_after(raw, is_fence)
        room = limit - (size(fence) + 1 if fence else 0) - max(self.closer(fence), self.closer(after)) - 1
        pieces = _split_words(raw, room, size) if size(raw) > room else [raw]
        for i, piece in enumerate(pieces):
            state_after = after if i == len(pieces) - 1 else fence
            while self.cur and self.cur_len + 1 + size(piece) + self.closer(state_after) > limit:
                if self.soft is not None and size("\n".join(self.cur[:self.soft])) >= limit // 2:
                    self.emit(self.soft, None)
                else:
                    self.emit(len(self.cur), fence)
            self.cur_len += size(piece) + (1 if self.cur else 0)
            self.cur.append(piece)
        self.fence = after
        if after is None and (not raw.strip() or is_fence):
            self.soft = len(self.cur)


def _fence_chars(fence_line: str) -> str:
    """The bare fence (```` ``` ```` or ``~~~``, same length) that closes ``fence_line``."""
    s = fence_line.strip()
    ch = s[0] if s else "`"
    n = len(s) - len(s.lstrip(ch))
    return ch * max(3, n)
