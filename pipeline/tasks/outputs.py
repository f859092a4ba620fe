"""Typed output data of the tasks: what an expert's answer means, normalised.

Each class is what :attr:`pipeline.types.Output.data` holds for the tasks that return structure
(labels, boxes, answers ...); :meth:`to_json` gives the JSON view the response stage condenses and
``hugginggpt run --json`` prints. Boxes are ``[xmin, ymin, xmax, ymax]`` in pixels of the input
image; scores are model confidences in ``[0, 1]`` as the model returned them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Label:
    """One class and its score (``None`` when the model gave none)."""

    label: str
    score: float | None


@dataclass(frozen=True)
class Labels:
    """Classification result, best first (text, image and audio classification)."""

    items: tuple[Label, ...]

    def to_json(self) -> dict[str, Any]:
        return {"labels": [asdict(x) for x in self.items]}


@dataclass(frozen=True)
class Entity:
    """A tagged span of a text (token classification); ``start``/``end`` are character offsets."""

    word: str
    entity: str
    score: float
    start: int | None
    end: int | None


@dataclass(frozen=True)
class Entities:
    """Token classification result, in text order."""

    items: tuple[Entity, ...]

    def to_json(self) -> dict[str, Any]:
        return {"entities": [asdict(x) for x in self.items]}


@dataclass(frozen=True)
class Span:
    """An extractive answer: the text and its character offsets in the context."""

    answer: str
    score: float | None
    start: int | None
    end: int | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Answer:
    """One answer of visual or document question answering."""

    answer: str
    score: float | None


@dataclass(frozen=True)
class Answers:
    """Question answering on an image, best first."""

    items: tuple[Answer, ...]

    def to_json(self) -> dict[str, Any]:
        return {"answers": [asdict(x) for x in self.items]}


@dataclass(frozen=True)
class SentenceScore:
    """How similar one of the other sentences is to the source sentence."""

    sentence: str
    score: float


@dataclass(frozen=True)
class Similarities:
    """Sentence similarity, in the order the other sentences were given."""

    items: tuple[SentenceScore, ...]

    def to_json(self) -> dict[str, Any]:
        return {"scores": [asdict(x) for x in self.items]}


@dataclass(frozen=True)
class Predictions:
    """Tabular classification: one predicted class per data row, in row order."""

    items: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"predictions": list(self.items)}


@dataclass(frozen=True)
class DetectedObject:
    """An object found in an image; ``box`` is ``(xmin, ymin, xmax, ymax)`` in pixels."""

    label: str
    score: float
    box: tuple[int, int, int, int]


@dataclass(frozen=True)
class Objects:
    """Object detection result, best score first."""

    items: tuple[DetectedObject, ...]

    def to_json(self) -> dict[str, Any]:
        return {"objects": [{"label": o.label, "score": o.score, "box": list(o.box)} for o in self.items]}


@dataclass(frozen=True)
class Segments:
    """Image segmentation: the label and score of each mask (the masks are drawn into a file)."""

    items: tuple[Label, ...]

    def to_json(self) -> dict[str, Any]:
        return {"segments": [asdict(x) for x in self.items]}


@dataclass(frozen=True)
class Fills:
    """Fill-mask: candidate completions of the masked text, best first."""

    items: tuple[Label, ...]
    sequences: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"fills": [{"token": x.label, "score": x.score, "sequence": s} for x, s in zip(self.items, self.sequences)]}


@dataclass(frozen=True)
class ImageSize:
    """Size of a generated image, in pixels."""

    width: int
    height: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AudioParts:
    """Audio-to-audio: the label of each returned track (the tracks are files)."""

    labels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"labels": list(self.labels)}
