"""TaskBench's planning metrics as its ``evaluate.py`` computes them (microsoft/JARVIS,
``taskbench/evaluate.py``, the "no matching" figures), as pure functions over per-request pairs
``(gold, predicted)``.

How ``evaluate.py`` counts, and how these functions follow it:

- Per request it takes the *union* of the gold and the predicted items (``flatten``): items are
  sets, duplicates count once, and each item of the union is a true positive (in both), a false
  positive (predicted only) or a false negative (gold only). sklearn's
  ``precision_recall_fscore_support`` then sums those over requests (:class:`Counts`).
- Node F1 (``flatten(types=tool names)``, ``labels=range(1, N + 1)``): only tools of the list
  count; a name outside it, gold or predicted, is neither hit nor miss. Micro sums the counts over
  the tools; macro averages each tool's precision, recall and F1 over *all* N tools of the list,
  a tool with no gold and no predicted occurrence scoring 0 (sklearn's ``zero_division`` default;
  :func:`node_scores`).
- t-F1, v-F1 and link F1 (``average="binary"``): every item counts (:func:`binary_counts`).
- Normalised edit distance: ``1 -`` the mean over requests of ``Levenshtein.ratio`` between the
  predicted and the gold sequence of tool ids (:func:`edit_distance`).
- Step ROUGE: ROUGE-1/2/L F-measure of the steps, one request's steps joined by newlines
  (:func:`step_rouge`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Hashable

from rapidfuzz.distance import Indel

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@dataclass
class Counts:
    """True positives, false positives and false negatives summed over requests."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, gold: Iterable[Hashable], predicted: Iterable[Hashable]) -> None:
        """Add one request's items, compared as sets (``evaluate.py``'s ``flatten``)."""
        g, p = set(gold), set(predicted)
        self.tp += len(g & p)
        self.fp += len(p - g)
        self.fn += len(g - p)

    def __iadd__(self, other: Counts) -> Counts:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        return self

    @property
    def precision(self) -> float:
        """TP / (TP + FP), 0.0 when nothing was predicted (sklearn's ``zero_division`` default)."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        """TP / (TP + FN), 0.0 when there was nothing to find."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        """2·TP / (2·TP + FP + FN) (the harmonic mean of precision and recall), 0.0 when all are 0."""
        total = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / total if total else 0.0

    def to_json(self) -> dict[str, float | int]:
        """``{"precision", "recall", "f1", "tp", "fp", "fn"}``, figures rounded to 4 places."""
        return {
            "precision": round(self.precision, 4), "recall": round(self.recall, 4), "f1": round(self.f1, 4),
            "tp": self.tp, "fp": self.fp, "fn": self.fn,
        }


@dataclass
class NodeScores:
    """Node precision, recall and F1, micro and macro, over a tool list.

    Attributes:
        tools: the tool list's names (the labels; macro averages over all of them).
        micro: counts summed over the tools.
        per_tool: each tool's counts (tools never seen are absent: all zero).
    """

    tools: tuple[str, ...]
    micro: Counts = field(default_factory=Counts)
    per_tool: dict[str, Counts] = field(default_factory=dict)

    def macro(self) -> tuple[float, float, float]:
        """Mean precision, recall and F1 over all :attr:`tools` (each 0 for a tool with nothing to
        count, as sklearn's ``average="macro"`` with ``labels=`` all tools and ``zero_division``
        left at its default)."""
        if not self.tools:
            return 0.0, 0.0, 0.0
        per = [self.per_tool.get(t, Counts()) for t in self.tools]
        return (statistics.fmean(c.precision for c in per), statistics.fmean(c.recall for c in per),
                statistics.fmean(c.f1 for c in per))

    def to_json(self) -> dict[str, dict[str, float | int]]:
        """``{"micro": Counts.to_json(), "macro": {"precision", "recall", "f1", "tools"}}``."""
        p, r, f = self.macro()
        return {"micro": self.micro.to_json(),
                "macro": {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4), "tools": len(self.tools)}}


def node_scores(pairs: Iterable[tuple[Sequence[str], Sequence[str]]], tools: Sequence[str]) -> NodeScores:
    """Node scores of ``(gold tool names, predicted tool names)`` per request.

    Follows ``evaluate.py``'s ``flatten(label_names, prediction_names, types=tool names)`` and
    ``precision_recall_fscore_support(labels=range(1, N + 1), average="micro" | "macro")``: per
    request the union of both name sets; a tool of ``tools`` in both is a true positive for that
    tool, in the prediction only a false positive, in the gold only a false negative; a name not in
    ``tools`` counts for nothing.

    Args:
        pairs: per request, gold and predicted node names (order and duplicates do not matter).
        tools: the tool list, in any order.

    Returns:
        :class:`NodeScores`.
    """
    known = frozenset(tools)
    scores = NodeScores(tuple(dict.fromkeys(tools)))
    for gold, predicted in pairs:
        g, p = set(gold) & known, set(predicted) & known
        for tool in g | p:
            scores.per_tool.setdefault(tool, Counts()).add({tool} & g, {tool} & p)
        scores.micro.add(g, p)
    return scores


def binary_counts(pairs: Iterable[tuple[Iterable[Hashable], Iterable[Hashable]]]) -> Counts:
    """Binary F1 counts of ``(gold items, predicted items)`` per request: ``evaluate.py``'s
    ``flatten(gt, pred)`` (no types) and ``precision_recall_fscore_support(average="binary")``, as
    used for t-F1 (``"{tool}-{argument name}"``), v-F1 (``"{tool}-{name}-{value}"``) and link F1
    (``(source tool, target tool)``)."""
    counts = Counts()
    for gold, predicted in pairs:
        counts.add(gold, predicted)
    return counts


def edit_distance(pairs: Iterable[tuple[Sequence[int], Sequence[int]]]) -> float | None:
    """TaskBench's normalised edit distance (lower is better) of ``(gold ids, predicted ids)``.

    ``evaluate.py`` maps each request's node names to tool ids (``tool_map``: 1-based position in
    ``tool_desc.json``, 0 for an unknown name), takes ``Levenshtein.ratio(predicted, gold)``, the
    Indel normalised similarity ``1 - indel distance / (len(a) + len(b))`` (1.0 for two empty
    sequences), averages it over requests and reports ``1 -`` that mean.

    Returns:
        A number in [0, 1]; ``None`` when there is no request.
    """
    ratios = [Indel.normalized_similarity(list(predicted), list(gold)) for gold, predicted in pairs]
    return 1 - statistics.fmean(ratios) if ratios else None


def step_rouge(pairs: Iterable[tuple[str, str]]) -> dict[str, float] | None:
    """ROUGE-1, ROUGE-2 and ROUGE-L F-measure of ``(gold steps, predicted steps)`` per request,
    each text being one request's steps joined by newlines.

    ``evaluate.py`` uses the Hugging Face ``rouge`` metric (Google's ``rouge_score``, no stemming)
    and reports the median (``mid``) of its bootstrap aggregate; this reports the plain mean of the
    per-request F-measures, which the bootstrap median estimates (equal up to resampling noise).

    Returns:
        ``{"rouge1", "rouge2", "rougeL"}`` in [0, 1]; ``None`` when there is no pair.
    """
    texts = list(pairs)
    if not texts:
        return None
    from rouge_score import rouge_scorer  # imports nltk: seconds, paid only when ROUGE is computed

    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=False)
    per = [scorer.score(gold, predicted) for gold, predicted in texts]
    return {t: statistics.fmean(s[t].fmeasure for s in per) for t in ROUGE_TYPES}
