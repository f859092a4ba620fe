"""TaskBench's planning metrics, as its ``evaluate.py`` defines them (no graph matching).

Per request, gold and predicted items are compared as *sets* (``evaluate.py``'s ``flatten`` takes
the union of both lists), and counts are summed over requests (micro average, as
``precision_recall_fscore_support(average="micro")`` over the flattened labels):

- nodes: tool names. Only tools of the domain count (``flatten(types=...)`` maps any other name,
  gold or predicted, to the negative label), so a predicted task with no TaskBench tool is neither
  a hit nor a false positive, and a gold tool we cannot plan is a miss.
- links: ``(source tool, target tool)`` pairs (``average="binary"``, every pair counts).
- arguments: ``"<tool>-<argument kind>"`` pairs (TaskBench's task-argument-name F1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Counts:
    """True positives, false positives and false negatives summed over requests."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, gold: Iterable[object], predicted: Iterable[object]) -> None:
        """Add one request's sets."""
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
        """Harmonic mean of precision and recall, 0.0 when both are 0."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def to_json(self) -> dict[str, float | int]:
        """``{"precision", "recall", "f1", "tp", "fp", "fn"}``, figures rounded to 4 places."""
        return {
            "precision": round(self.precision, 4), "recall": round(self.recall, 4), "f1": round(self.f1, 4),
            "tp": self.tp, "fp": self.fp, "fn": self.fn,
        }


@dataclass
class GraphScores:
    """Node, link and argument-name counts of a set of requests."""

    nodes: Counts
    links: Counts
    arguments: Counts

    @classmethod
    def empty(cls) -> GraphScores:
        """Scores with no request counted yet."""
        return cls(Counts(), Counts(), Counts())

    def add(
        self,
        tools: frozenset[str],
        gold: tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[str, ...]],
        predicted: tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[str, ...]],
    ) -> None:
        """Add one request: ``(nodes, links, arguments)`` of the gold and the predicted graph.

        Args:
            tools: the domain's tool names (other node names are ignored, as in ``evaluate.py``).
        """
        self.nodes.add((n for n in gold[0] if n in tools), (n for n in predicted[0] if n in tools))
        self.links.add(gold[1], predicted[1])
        self.arguments.add(gold[2], predicted[2])

    def to_json(self) -> dict[str, dict[str, float | int]]:
        """``{"node", "link", "argument"}`` each as :meth:`Counts.to_json`."""
        return {"node": self.nodes.to_json(), "link": self.links.to_json(), "argument": self.arguments.to_json()}
