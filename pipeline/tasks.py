"""The task vocabulary: every task of the paper's table (HuggingGPT §3.1, Table 1), named by its
Hugging Face pipeline tag, plus the ControlNet tasks of the reference implementation.

Each :class:`TaskSpec` states which argument keys a task accepts and of which modality, what it
produces, and how it can be served. Planning validation, resource passing and the experts all read
this one table.
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import Modality

# ControlNet conditions of the reference implementation (lllyasviel/sd-controlnet-*).
CONTROLNET_CONDITIONS: tuple[str, ...] = (
    "canny",
    "depth",
    "hed",
    "mlsd",
    "normal",
    "openpose",
    "scribble",
    "seg",
)


@dataclass(frozen=True)
class TaskSpec:
    """How one task looks to the planner and the executor.

    Attributes:
        name: pipeline tag or ControlNet task name.
        domain: ``"nlp" | "cv" | "audio" | "video" | "controlnet"``.
        required: argument key to modality, all needed.
        optional: argument key to modality, may be given.
        outputs: modalities the task produces (used to check ``<resource>-N`` placeholders).
        description: one line for the planning prompt (our wording).
        controller_capable: the controller LLM can do it itself (routable by setting).
        local: computed in-process, no model call (canny edge maps).
        catalog_task: the catalog key whose models serve it (defaults to ``name``).
    """

    name: str
    domain: str
    required: dict[str, Modality]
    optional: dict[str, Modality]
    outputs: tuple[Modality, ...]
    description: str
    controller_capable: bool = False
    local: bool = False
    catalog_task: str | None = None

    @property
    def allowed(self) -> dict[str, Modality]:
        """All accepted argument keys with their modality."""
        return {**self.required, **self.optional}


def _t(name, domain, required, outputs, description, optional=None, **kw) -> TaskSpec:
    return TaskSpec(name, domain, dict(required), dict(optional or {}), tuple(outputs), description, **kw)


_SPECS: list[TaskSpec] = [
    # NLP
    _t("text-classification", "nlp", {"text": "text"}, ["text"], "label a text (sentiment, topic, ...)"),
    _t("token-classification", "nlp", {"text": "text"}, ["text"], "tag words in a text (named entities, parts of speech)"),
    _t("text2text-generation", "nlp", {"text": "text"}, ["text"], "rewrite a text into another text", controller_capable=True),
    _t("summarization", "nlp", {"text": "text"}, ["text"], "shorten a text to its main points", controller_capable=True),
    _t("translation", "nlp", {"text": "text"}, ["text"], "translate a text (say the target language in the text)", controller_capable=True),
    _t(
        "question-answering",
        "nlp",
        {"text": "text", "context": "text"},
        ["text"],
        "answer a question (text) from a passage (context)",
    ),
    _t("conversational", "nlp", {"text": "text"}, ["text"], "reply to a chat message", controller_capable=True),
    _t("text-generation", "nlp", {"text": "text"}, ["text"], "continue or write a text from a prompt", controller_capable=True),
    _t(
        "sentence-similarity",
        "nlp",
        {"text": "text", "context": "text"},
        ["text"],
        "score how similar a sentence (text) is to others (context, one per line)",
    ),
    _t(
        "tabular-classification",
        "nlp",
        {"text": "text"},
        ["text"],
        "classify rows of a table given as CSV text",
    ),
    # CV
    _t("object-detection", "cv", {"image": "image"}, ["image", "text"], "find and box objects in an image"),
    _t("image-classification", "cv", {"image": "image"}, ["text"], "name what an image shows"),
    _t("image-to-text", "cv", {"image": "image"}, ["text"], "describe an image in a sentence"),
    _t("text-to-image", "cv", {"text": "text"}, ["image"], "make an image from a description"),
    _t(
        "image-to-image",
        "cv",
        {"image": "image"},
        ["image"],
        "edit an image as the text says",
        optional={"text": "text"},
    ),
    _t("image-segmentation", "cv", {"image": "image"}, ["image", "text"], "split an image into labelled regions (masks)"),
    _t("depth-estimation", "cv", {"image": "image"}, ["image"], "estimate a depth map of an image"),
    _t(
        "visual-question-answering",
        "cv",
        {"image": "image", "text": "text"},
        ["text"],
        "answer a question (text) about an image",
    ),
    _t(
        "document-question-answering",
        "cv",
        {"image": "image", "text": "text"},
        ["text"],
        "answer a question (text) about a document image",
    ),
    # Audio
    _t("text-to-speech", "audio", {"text": "text"}, ["audio"], "speak a text aloud"),
    _t("automatic-speech-recognition", "audio", {"audio": "audio"}, ["text"], "transcribe speech to text"),
    _t("audio-to-audio", "audio", {"audio": "audio"}, ["audio"], "transform audio (enhance, separate, convert voice)"),
    _t("audio-classification", "audio", {"audio": "audio"}, ["text"], "label a sound or a speaker's emotion"),
    # Video
    _t("text-to-video", "video", {"text": "text"}, ["video"], "make a short video from a description"),
]

# ControlNet: "<cond>-control" extracts the condition image, "<cond>-text-to-image" draws from it.
for _cond in CONTROLNET_CONDITIONS:
    _SPECS.append(
        _t(
            f"{_cond}-control",
            "controlnet",
            {"image": "image"},
            ["image"],
            f"extract the {_cond} condition image (for {_cond}-text-to-image)",
            local=(_cond == "canny"),
        )
    )
    _SPECS.append(
        _t(
            f"{_cond}-text-to-image",
            "controlnet",
            {"image": "image", "text": "text"},
            ["image"],
            f"draw a new image that follows a {_cond} condition image and a text",
        )
    )

TASKS: dict[str, TaskSpec] = {s.name: s for s in _SPECS}

# Names planners often write instead of the pipeline tag (reference implementation, TaskBench).
ALIASES: dict[str, str] = {
    "image-cls": "image-classification",
    "image-captioning": "image-to-text",
    "image-caption": "image-to-text",
    "vqa": "visual-question-answering",
    "asr": "automatic-speech-recognition",
    "speech-recognition": "automatic-speech-recognition",
    "tts": "text-to-speech",
    "image-editing": "image-to-image",
    "pose-detection": "openpose-control",
    "pose-control": "openpose-control",
    "pose-text-to-image": "openpose-text-to-image",
    "segmentation-control": "seg-control",
    "segmentation-text-to-image": "seg-text-to-image",
    "ner": "token-classification",
    "chat": "conversational",
}


def canonical_task(name: str) -> str | None:
    """Map a planner's task name to the canonical name, or ``None`` if unknown.

    Case, spaces and underscores are normalised (``"Object Detection"`` → ``"object-detection"``).
    """
    key = "-".join(str(name).strip().lower().replace("_", " ").split())
    if key in TASKS:
        return key
    return ALIASES.get(key)


def spec(name: str) -> TaskSpec:
    """The :class:`TaskSpec` of a canonical task name. Raises ``KeyError`` if unknown."""
    return TASKS[name]
