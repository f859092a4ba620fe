"""Text helpers shared by the sandbox's stand-in controller rules (pure functions, no I/O).

Quoted passages, clause boundaries and sentences of a user request, as the keyword planner
(:mod:`sandbox.planning`) and the response writer (:mod:`sandbox.heuristics`) read them.
"""

from __future__ import annotations

import re

_QUOTE_RE = re.compile(r'"([^"\n]+)"|“([^”]+)”|‘([^’]+)’|(?<![A-Za-z0-9])\'((?:[^\'\n]|(?<=[A-Za-z])\'(?=[A-Za-z]))+?)\'(?![A-Za-z0-9])')

_BOUNDARY_RE = re.compile(
    r"[.;!?](?=\s|$)"
    r"|,\s*(?:and\s+)?(?:then|after\s+that|afterwards|finally|next|but|and)\b"
    r"|\s(?:and\s+)?then\b"
    r"|\s(?:after\s+that|afterwards|finally|also|additionally|lastly)\b"
    r"|\sand\s+(?=(?:also\s+)?(?:tell|describe|classify|detect|read|say|speak|make|turn|translate|summari[sz]e"
    r"|transcribe|answer|segment|estimate|find|count|identify|what|which|how|give|show|generate|create"
    r"|draw|convert|caption|edit|change|label|extract|compare|analy[sz]e)\b)",
    re.IGNORECASE,
)


_FILE_NAME_RE = re.compile(r"^[\w.-]+\.(?:png|jpe?g|gif|webp|bmp|wav|mp3|ogg|flac|m4a|opus|mp4|webm|mov|avi|mkv|txt)$", re.I)


def quotes(text: str) -> list[tuple[int, int, str]]:
    """Quoted passages of ``text`` as ``(start, end, inner text)``, in order.

    Double quotes, curly quotes and single quotes that are not apostrophes (``I'd`` is not a quote).
    A quoted file name (``'example.jpg'``) is a reference, not content, and is left out.
    """
    out = []
    for m in _QUOTE_RE.finditer(text):
        inner = next(g for g in m.groups() if g is not None)
        if inner.strip() and not _FILE_NAME_RE.match(inner.strip()):
            out.append((m.start(), m.end(), inner.strip()))
    return out


def mask_quotes(text: str) -> str:
    """``text`` with every quoted passage blanked out (same length), so boundaries ignore quotes."""
    chars = list(text)
    for s, e, _ in quotes(text):
        for i in range(s + 1, e - 1):
            chars[i] = "_"
    return "".join(chars)


def clause_end(text: str, start: int) -> int:
    """Index where the clause that contains ``start`` ends (next sentence or ``then`` boundary)."""
    m = _BOUNDARY_RE.search(mask_quotes(text), start)
    return m.start() if m else len(text)


def first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of ``text`` (at most ``limit`` characters, cut at a word)."""
    text = " ".join(text.split())
    m = re.search(r"(?<=[.!?])\s", text)
    s = text[: m.start()] if m else text
    if len(s) > limit:
        s = s[:limit].rsplit(" ", 1)[0] + "…"
    return s


SMALL_TALK = re.compile(
    r"^\s*(hi|hello|hey|yo|good (morning|afternoon|evening)|thanks?|thank you|how are you|who are you"
    r"|what can you do|what('?s| is) your name|help)\b",
    re.IGNORECASE,
)
"""Greetings and thanks at the start of a request: no tool is planned for them."""
