"""Text outputs of the inference stand-in, derived from their inputs (sandbox only, pure functions).

Word counts stand in for models: sentiment from a small list of positive and negative words,
entities from capitalised words, similarity from shared words, answers from the sentence that
shares most words with the question.
"""

from __future__ import annotations

import re
from typing import Any

_POSITIVE = {"good", "great", "love", "like", "happy", "excellent", "nice", "wonderful", "best", "amazing", "gained", "rallied", "beautiful"}
_NEGATIVE = {"bad", "hate", "terrible", "sad", "awful", "worst", "poor", "angry", "fell", "lost", "ugly", "broken"}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def sentiment(text: str) -> list[dict[str, Any]]:
    """Text-classification output ``[{"label": "POSITIVE"|"NEGATIVE", "score"}]``, best first:
    the share of positive words among positive and negative ones (add-one smoothed)."""
    ws = _words(text)
    pos = sum(w in _POSITIVE for w in ws)
    neg = sum(w in _NEGATIVE for w in ws)
    p = round((pos + 1) / (pos + neg + 2), 4)
    items = [{"label": "POSITIVE", "score": p}, {"label": "NEGATIVE", "score": round(1 - p, 4)}]
    return sorted(items, key=lambda x: -x["score"])


def entities(text: str) -> list[dict[str, Any]]:
    """Token-classification output: runs of capitalised words (not sentence-initial ones) as
    ``[{"entity_group": "MISC", "score", "word", "start", "end"}]`` (character offsets)."""
    out = []
    for m in re.finditer(r"\b[A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*", text):
        start, word = m.start(), m.group(0)
        if start == 0 or text[:start].rstrip().endswith((".", "!", "?")):
            # A capital at the start of a sentence says nothing: drop that first word.
            first, _, rest = word.partition(" ")
            if not rest.strip():
                continue
            start += len(word) - len(rest.lstrip())
            word = rest.strip()
        out.append({"entity_group": "MISC", "score": 0.9, "word": word, "start": start, "end": start + len(word)})
    return out


def similarity(a: str, b: str) -> float:
    """Sentence-similarity score: Jaccard index of the two texts' word sets (0..1)."""
    x, y = set(_words(a)), set(_words(b))
    return round(len(x & y) / len(x | y), 4) if x | y else 0.0


def best_span(question: str, context: str) -> tuple[str, int, int]:
    """Question-answering output ``(answer, start, end)``: the sentence of ``context`` sharing the
    most words with ``question`` and its character offsets."""
    best, best_score, best_start = context.strip(), -1.0, 0
    q = set(_words(question))
    for m in re.finditer(r"[^.!?]+[.!?]?", context):
        s = m.group(0).strip()
        if not s:
            continue
        score = len(q & set(_words(s)))
        if score > best_score:
            best, best_score, best_start = s, score, m.start() + (len(m.group(0)) - len(m.group(0).lstrip()))
    return best, best_start, best_start + len(best)
