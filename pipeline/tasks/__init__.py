"""The task registry: every task of the paper's table (HuggingGPT §3.1, Table 1), named by its
Hugging Face pipeline tag, plus the ControlNet tasks of the reference implementation and the
Hub's newer tags (vision-language chat, image-to-video, instruction edits, image-text-to-video,
video-to-video, video and audio chat models).

One :class:`~pipeline.tasks.base.TaskSpec` entry per task, split by domain (:mod:`.nlp`,
:mod:`.vision`, :mod:`.audio`, :mod:`.video`, :mod:`.controlnet`): its argument kinds, what it
produces, how it is called and how its output is normalised. Planning validation, resource
passing and the experts all read this one table; adding a task is adding one entry.
"""

from __future__ import annotations

from . import audio, controlnet, multimodal, nlp, video, vision
from .base import Inputs, Saver, TaskSpec
from .controlnet import CONTROLNET_CONDITIONS

TASKS: dict[str, TaskSpec] = {s.name: s for s in (*nlp.TASKS, *vision.TASKS, *audio.TASKS, *video.TASKS, *controlnet.TASKS,
                                               *multimodal.TASKS)}
"""Canonical task name → its entry."""

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
    "vlm": "image-text-to-text",
    "visual-chat": "image-text-to-text",
    "animate-image": "image-to-video",
    "instruction-edit": "image-text-to-image",
    "image-instruction-editing": "image-text-to-image",
    "video-qa": "video-text-to-text",
    "video-question-answering": "video-text-to-text",
    "audio-question-answering": "audio-text-to-text",
    "video-editing": "video-to-video",
    # TaskBench's tool names (Hugging Face and multimedia domains) and near names models write
    # for them; the pipeline tags themselves ("Image Classification", "Text-to-Speech") need none.
    "sentiment-analysis": "text-classification",
    "text-sentiment-analysis": "text-classification",
    "text-to-text": "text2text-generation",
    "text-to-text-generation": "text2text-generation",
    "text-summarizer": "summarization",
    "text-summarization": "summarization",
    "text-translator": "translation",
    "text-translation": "translation",
    "named-entity-recognition": "token-classification",
    "audio-to-text": "automatic-speech-recognition",
    "speech-to-text": "automatic-speech-recognition",
    "text-to-audio": "text-to-speech",
    "speech-synthesis": "text-to-speech",
    "audio-noise-reduction": "audio-to-audio",
    "image-generation": "text-to-image",
    "visual-qa": "visual-question-answering",
    "document-qa": "document-question-answering",
    "ocr": "image-to-text",
}


def canonical_task(name: str) -> str | None:
    """Map a planner's task name to the canonical name, or ``None`` if unknown.

    Case, spaces and underscores are normalised (``"Object Detection"`` → ``"object-detection"``).
    """
    key = "-".join(str(name).strip().lower().replace("_", " ").split())
    if key in TASKS:
        return key
    return ALIASES.get(key)

__all__ = ["ALIASES", "CONTROLNET_CONDITIONS", "TASKS", "Inputs", "Saver", "TaskSpec", "canonical_task"]
