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
    chunks: list[str] = []
    cur: list[str] = []
    cur_len = 0  # size("\n".join(cur))
    fence: str | None = None  # opening line of the code block we are inside
    soft: int | None = None  # index into cur where a split is pleasant (outside code)

    def closer(f: str | None) -> int:
        return size(_fence_chars(f)) + 1 if f else 0

    def has_content(lines: list[str]) -> bool:
        # a bare fence is markup; a fence with an info string ("```py") is the user's text too
        return any(ln.strip() and not (_FENCE.match(ln) and not ln.strip().strip("`~")) for ln in lines)

    def emit(upto: int, open_fence: str | None) -> None:
        nonlocal cur, cur_len, soft
        head, rest = cur[:upto], cur[upto:]
        body = "\n".join(head).strip("\n")
        if open_fence is not None and upto == len(cur):
            body += "\n" + _fence_chars(open_fence)
        if has_content(head):
            chunks.append(body)
        if upto == len(cur):
            if open_fence is not None:
                rest = [open_fence if reopen_language else _fence_chars(open_fence)]
            else:
                rest = []
        while rest and not rest[0].strip():
            rest = rest[1:]
        cur = rest
        cur_len = size("\n".join(cur))
        soft = None

    for raw in text.split("\n"):
        is_fence = _FENCE.match(raw) is not None
        if is_fence and fence is None:
            after: str | None = raw.strip()
            if cur and has_content(cur):
                soft = len(cur)
        elif is_fence and fence is not None and raw.strip().strip("`~") == "" and raw.strip()[0] == fence[0] \
                and len(raw.strip()) >= len(_fence_chars(fence)):
            after = None
        else:
            after = fence
        room = limit - (size(fence) + 1 if fence else 0) - max(closer(fence), closer(after)) - 1
        pieces = _split_words(raw, room, size) if size(raw) > room else [raw]
        for i, piece in enumerate(pieces):
            state_after = after if i == len(pieces) - 1 else fence
            while cur and cur_len + 1 + size(piece) + closer(state_after) > limit:
                if soft is not None and size("\n".join(cur[:soft])) >= limit // 2:
                    emit(soft, None)
                else:
                    emit(len(cur), fence)
            cur_len += size(piece) + (1 if cur else 0)
            cur.append(piece)
        fence = after
        if fence is None and (not raw.strip() or is_fence):
            soft = len(cur)
    emit(len(cur), fence)
    return chunks


def _fence_chars(fence_line: str) -> str:
    """The bare fence (```` ``` ```` or ``~~~``, same length) that closes ``fence_line``."""
    s = fence_line.strip()
    ch = s[0] if s else "`"
    n = len(s) - len(s.lstrip(ch))
    return ch * max(3, n)
