"""What one task entry of the registry holds, and the helpers entries share.

A :class:`TaskSpec` says which arguments a task takes (and of which modality), what it produces,
how the planner should understand it, how it is called on huggingface_hub's
``AsyncInferenceClient`` and how the answer is normalised into an
:class:`~pipeline.types.Output` with typed data (:mod:`pipeline.tasks.outputs`). The registry's
shape follows huggingface_hub's own ``PROVIDERS[provider][task]`` table of small helper objects.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, Union

from huggingface_hub import (
    AudioClassificationOutputElement,
    AutomaticSpeechRecognitionOutput,
    ImageClassificationOutputElement,
    ImageToTextOutput,
    SummarizationOutput,
    TextClassificationOutputElement,
    TextGenerationOutput,
    TranslationOutput,
    ZeroShotClassificationOutputElement,
    ZeroShotImageClassificationOutputElement,
)

from ..config import OutputLimits
from ..types import Modality, Output, Resource
from .outputs import Label, Labels

Domain = str
"""``"nlp" | "vision" | "audio" | "video" | "controlnet"``."""

ReplyKind = Literal["json", "media", "media-json"]
"""How a task's expert answers, which decides the size limit of its reply
(:class:`pipeline.experts.http.CallScope`): ``"json"`` JSON or text (``[inference]
max_json_bytes``); ``"media"`` raw image/audio/video bytes (``max_media_bytes``; a JSON answer of
such a task still gets ``max_json_bytes``); ``"media-json"`` JSON carrying base64 media, such as
masks or audio tracks (``max_media_bytes``)."""


@dataclass(frozen=True)
class Inputs:
    """A task's arguments, read and checked, as one expert call takes them.

    Attributes:
        text: argument key → text (``"text"``, ``"context"``).
        media: argument key → the file's bytes (``"image"``, ``"audio"``, ``"video"``).
        resources: argument key → the :class:`Resource` the bytes came from (for descriptions).
        prepared: what the entry's ``prepare`` made of the arguments before the call (the list of
            sentences of sentence similarity, the table of tabular classification), else ``None``.
    """

    text: dict[str, str] = field(default_factory=dict)
    media: dict[str, bytes] = field(default_factory=dict)
    resources: dict[str, Resource] = field(default_factory=dict)
    prepared: Any = None


class Saver(Protocol):
    """Stores a task's generated files in the conversation (bound to one task of one run), and
    carries the :class:`OutputLimits` that apply to the task's answer."""

    limits: OutputLimits

    async def image(self, image: Any, what: str) -> Resource:
        """Store a PIL image or encoded image bytes (re-encoded as PNG only when not already
        PNG/JPEG/WebP/GIF); ``what`` starts the description (size is added)."""
        ...

    async def file(self, data: bytes, kind: Modality, mime: str, what: str) -> Resource:
        """Store ``data`` of ``kind``/``mime`` with the description ``what``."""
        ...


Call = Callable[[Any, str, Inputs], Awaitable[Any]]
"""``(client, model or URL, inputs) -> raw answer``; ``client`` is an ``AsyncInferenceClient``
with a ``post_raw(url, json=..., data=...) -> (bytes, content type)`` helper for tasks the
client has no method for (see :class:`pipeline.experts.hub.HubRunner`)."""
Normalise = Callable[[Any, Inputs, Saver], Awaitable[Output]]
"""``(raw answer, inputs, saver) -> Output``; raises ``ValueError`` when the answer is unusable."""


@dataclass(frozen=True)
class TaskSpec:
    """One task of the registry.

    Attributes:
        name: Hugging Face pipeline tag, or a ControlNet task (``canny-control``).
        domain: ``"nlp" | "vision" | "audio" | "video" | "controlnet"``.
        required: argument key → modality, all needed.
        optional: argument key → modality, may be given.
        outputs: modalities produced (checks ``<resource>-N`` placeholders in plans).
        description: one line for the planning prompt (our wording).
        call: how a model is called (``None``: no model serves it, see ``local``).
        normalise: how its answer becomes an :class:`Output`.
        prepare: checks and parses the arguments before the call (raises ``ValueError`` with a
            sentence for the user), result in :attr:`Inputs.prepared`.
        controller_capable: the controller LLM can do it itself (``[inference] controller_tasks``).
        local: computed in-process without a model (canny edge maps).
        from_request: optional text arguments read from the user's request when the plan leaves
            them out (request text -> ``{key: value}``; the translation's languages).
        reply: :data:`ReplyKind`, which size limit bounds the expert's reply.
    """

    name: str
    domain: Domain
    required: dict[str, Modality]
    outputs: tuple[Modality, ...]
    description: str
    call: Call | None
    normalise: Normalise | None
    optional: dict[str, Modality] = field(default_factory=dict)
    prepare: Callable[[Inputs], Any] | None = None
    controller_capable: bool = False
    local: bool = False
    from_request: Callable[[str], dict[str, str]] | None = None
    reply: ReplyKind = "json"

    @property
    def allowed(self) -> dict[str, Modality]:
        """All accepted argument keys with their modality."""
        return {**self.required, **self.optional}


def flatten(result: Any) -> list[Any]:
    """Classification answers come as a list, a list of lists, or a single element."""
    if isinstance(result, list):
        if result and isinstance(result[0], list):
            return list(result[0])
        return list(result)
    return [result]


def summary(items: list[tuple[str, float | None]], limit: int = 5) -> str:
    """``"cat (0.92), dog (0.05)"`` from ``(label, score)`` pairs, ``"and N more"`` past ``limit``."""
    parts = [f"{label} ({score:.2f})" if score is not None else str(label) for label, score in items[:limit]]
    if len(items) > limit:
        parts.append(f"and {len(items) - limit} more")
    return ", ".join(parts)


T = TypeVar("T")


def best(items: Iterable[T], limit: int, score: Callable[[T], float | None]) -> list[T]:
    """The ``limit`` items of highest ``score`` (``None`` counts as 0), best first; ties keep
    their order. ``heapq.nlargest``: O(n log limit), nothing else is built for dropped items."""
    indexed = list(enumerate(items))
    top = heapq.nlargest(limit, indexed, key=lambda p: (score(p[1]) or 0.0, -p[0]))
    return [x for _, x in top]


Classified = Union[
    ImageClassificationOutputElement, TextClassificationOutputElement, AudioClassificationOutputElement,
    ZeroShotClassificationOutputElement, ZeroShotImageClassificationOutputElement,
]
"""One label with its score, as the client's classification methods answer it."""


async def labels_output(raw: Classified | list[Classified] | list[list[Classified]], inputs: Inputs, saver: Saver) -> Output:
    """Normalise a classification answer (elements with ``label`` and ``score``) into :class:`Labels`,
    best first, at most ``saver.limits.max_items``."""
    items = [Label(str(x.label), float(x.score) if x.score is not None else None) for x in flatten(raw)]
    items = best(items, saver.limits.max_items, lambda x: x.score)
    text = summary([(x.label, x.score) for x in items]) if items else "no labels"
    return Output(text=text, data=Labels(tuple(items)))


TextAnswer = Union[str, ImageToTextOutput, SummarizationOutput, TranslationOutput, AutomaticSpeechRecognitionOutput,
                   TextGenerationOutput]
"""An answer that is one text: a string, or the client's output type holding it in one field."""


async def text_output(raw: TextAnswer, inputs: Inputs, saver: Saver, attribute: str) -> Output:
    """Normalise an answer whose text is in ``attribute`` (the field of the client's output type:
    ``generated_text``, ``summary_text``, ``translation_text``, ``text``) or that is a plain string."""
    value = raw if isinstance(raw, str) else getattr(raw, attribute)
    return Output(text=str(value).strip())


def text_of(attribute: str) -> Normalise:
    """A normaliser taking the answer's ``attribute`` as the output text."""

    async def normalise(raw: TextAnswer, inputs: Inputs, saver: Saver) -> Output:
        return await text_output(raw, inputs, saver, attribute)

    return normalise


def entry(name: str, domain: Domain, required: dict[str, Modality], outputs: tuple[Modality, ...], description: str,
         call: Call | None, normalise: Normalise | None, **kw: Any) -> TaskSpec:
    """Build a :class:`TaskSpec` (a short form for the registry's tables)."""
    return TaskSpec(name, domain, dict(required), tuple(outputs), description, call, normalise, **kw)
