"""Text as the conversation store keeps it: condensed answers and valid UTF-8.

The chat log enters the planning prompt (Shen et al., NeurIPS 2023, §3.1: the planner sees the
chat history), so each stored answer is kept twice: in full for display, and clipped to
:data:`SUMMARY_CHARS` characters (``Turn.answer``) for the prompt, where the token budget
(``[storage] context_tokens``) is tight.
"""

from __future__ import annotations

import re

SUMMARY_CHARS = 300
"""Answers enter the chat log condensed to at most this many characters (``Turn.answer``)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def clip_summary(text: str, limit: int = SUMMARY_CHARS) -> str:
    """Condense an answer for the chat log.

    Args:
        text: any string (the run's answer or error sentence).
        limit: maximum length of the result in characters (default :data:`SUMMARY_CHARS`).

    Returns:
        ``text`` with every run of whitespace collapsed to one space and trimmed; if that is
        longer than ``limit``, it is cut at the last word boundary past half the limit (else
        mid-word), trailing punctuation ``" ,;:.-"`` is dropped and ``"…"`` appended, so the
        result has at most ``limit`` characters.
    """
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "…"


def valid_utf8(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD.

    Some platforms hand over undecodable input as lone surrogates (Python's ``surrogateescape``);
    SQLite accepts only valid UTF-8, so every string goes through this before it is stored.

    Args:
        text: any string.

    Returns:
        ``text`` itself when it encodes as UTF-8, else a copy with each surrogate code point
        (U+D800..U+DFFF) replaced by U+FFFD.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
