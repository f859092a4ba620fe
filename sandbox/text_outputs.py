"""Text outputs of the inference stand-in, derived from their inputs (sandbox only, pure functions).

Word counts stand in for models: sentiment from a small list of positive and negative words,
entities from capitalised words, similarity from shared words, answers from the sentence that
shares most words with the question, and mask fillers ranked by a hash of the input.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .faults import Fault

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


MASK_TOKENS = ("[MASK]", "<mask>")
"""Mask tokens the fill-mask stand-in accepts: BERT's ``[MASK]`` and RoBERTa's ``<mask>``."""

_FILLERS = (
    "capital", "heart", "center", "city", "home", "pride", "part", "best", "first", "jewel",
    "symbol", "gateway", "soul", "face", "voice", "name",
)


def _weight(text: str, word: str) -> float:
    """A stable pseudo-probability in (0, 1] for ``word`` filling the hole of ``text``."""
    digest = hashlib.sha256(f"{text}\x00{word}".encode()).digest()
    return (int.from_bytes(digest[:4], "big") + 1) / 2**32


def fill_mask(text: str, top_k: int | None = None, targets: list[str] | None = None) -> list[dict[str, Any]]:
    """Fill-mask output for ``text``, in the Hugging Face wire format (``FillMaskOutputElement``).

    Args:
        text: input holding a mask token (:data:`MASK_TOKENS`); only the first one is filled.
        top_k: how many predictions to return (default 5, as the Inference API).
        targets: candidate words to score instead of the stand-in's own small vocabulary.

    Returns:
        ``[{"sequence": text with the word in the hole, "score": 0..1, "token": int id,
        "token_str": word}]``, best first (scores descending, ties by word). Scores come from a
        hash of ``text`` and the word, normalised over all candidates: the same input always
        gives the same answer, a different input a different ranking.

    Raises:
        Fault: 400 when ``text`` holds no mask token or ``top_k`` is not a positive integer.
    """
    found = [(text.find(tok), tok) for tok in MASK_TOKENS if tok in text]
    if not found:
        raise Fault(400, {"error": f"No mask_token ({MASK_TOKENS[0]}) found on the input"})
    pos, tok = min(found)
    if top_k is None:
        top_k = 5
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise Fault(400, {"error": f"top_k must be a positive integer, got {top_k!r}"})
    words = [w.strip() for w in targets or [] if isinstance(w, str) and w.strip()]
    words = list(dict.fromkeys(words))
    vocab = words or list(_FILLERS)
    weights = {w: _weight(text, w) ** 3 for w in vocab}
    total = sum(weights.values())
    ranked = sorted(vocab, key=lambda w: (-weights[w], w))[:top_k]
    out = []
    for word in ranked:
        token = 1000 + _FILLERS.index(word) if word in _FILLERS else int(hashlib.sha256(word.encode()).hexdigest()[:4], 16)
        out.append({
            "sequence": text[:pos] + word + text[pos + len(tok):],
            "score": round(weights[word] / total, 4),
            "token": token,
            "token_str": word,
        })
    return out
