"""Multimodal chat tasks: ``image-text-to-text`` (a VLM answering open questions about one or
several images) and how it stands in for the classic vision tasks; ``video-text-to-text`` (a
VLM watching a video) and ``audio-text-to-text`` (a model listening to a recording).

Inference Providers serve VLMs through chat completion with image content (the OpenAI message
format: ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``), which
``huggingface_hub``'s ``AsyncInferenceClient.chat_completion`` sends as it is; a video is a
``video_url`` part (the OpenAI-compatible extension vLLM documents), audio an ``input_audio`` part
(OpenAI's chat format). Media travel as ``data:`` URIs built from the conversation's own files,
never as URLs (the model output and the plan are untrusted; nothing here makes anyone fetch a URL).
"""

from __future__ import annotations

import base64
from typing import Any

from ..media import sniff
from ..types import Output
from .base import Inputs, Saver, TaskSpec, entry

VLM_TASK = "image-text-to-text"
"""The pipeline tag of vision-language chat models."""

EXTRA_IMAGES = ("image2", "image3", "image4")
"""Argument keys of further images (``image`` is the first); at most four images per question."""

MAX_ANSWER_TOKENS = 1024
"""Tokens a VLM may write for one answer."""

STANDS_IN_FOR: dict[str, str] = {
    "image-to-text": "Describe this image in one or two sentences.",
    "visual-question-answering": "{question}\nAnswer briefly.",
    "document-question-answering": "This image is a document page. {question}\nAnswer briefly from the document.",
}
"""Tasks a VLM may run when no dedicated model of theirs is live: task → the question it is asked
(``{question}`` is the task's ``text`` argument)."""


def vlm_args(task: str, args: dict[str, Any]) -> dict[str, Any]:
    """The ``image-text-to-text`` arguments that run ``task`` (one of :data:`STANDS_IN_FOR`) on a VLM.

    Args:
        task: the planned task.
        args: its resolved arguments (``image``: a resource; ``text``: the question, if any).

    Returns:
        ``{"image": ..., "text": question}``.

    Raises:
        KeyError: ``task`` is not one a VLM stands in for.
    """
    question = str(args.get("text") or "").strip()
    template = STANDS_IN_FOR[task]
    text = template.format(question=question or "What does it say?")
    return {"image": args["image"], "text": text}


def data_uri(data: bytes) -> str:
    """``data:<mime>;base64,...`` of image bytes (the type sniffed from the content).

    Raises:
        ValueError: the bytes are not an image.
    """
    s = sniff(data)
    if s is None or s.kind != "image":
        raise ValueError("an image-text-to-text input is not an image")
    return f"data:{s.mime};base64,{base64.b64encode(data).decode('ascii')}"


def messages(inputs: Inputs) -> list[dict[str, Any]]:
    """The chat completion messages: one user message with the question, then each image."""
    keys = ("image", *EXTRA_IMAGES)
    content: list[dict[str, Any]] = [{"type": "text", "text": inputs.text["text"]}]
    content += [{"type": "image_url", "image_url": {"url": data_uri(inputs.media[k])}} for k in keys if k in inputs.media]
    return [{"role": "user", "content": content}]


def _call(c: Any, model: str, inputs: Inputs) -> Any:
    return c.chat_completion(messages(inputs), model=model, max_tokens=MAX_ANSWER_TOKENS)


async def _answer(raw: Any, inputs: Inputs, saver: Saver) -> Output:
    choices = getattr(raw, "choices", None) or []
    text = choices[0].message.content if choices else None
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the vision-language model's answer has no text")
    return Output(text=text.strip())


VIDEO_VLM_TASK = "video-text-to-text"
"""The pipeline tag of chat models that watch a video (the planner asks them when one is served,
else it reads the video's frames and sound, :mod:`pipeline.video_parts`)."""

AUDIO_LM_TASK = "audio-text-to-text"
"""The pipeline tag of chat models that listen to audio."""


def _media_uri(data: bytes, kind: str, task: str) -> tuple[str, str]:
    """``(data: URI, subtype)`` of ``data``, which must sniff as ``kind``.

    Raises:
        ValueError: the bytes are not of ``kind``.
    """
    s = sniff(data)
    if s is None or s.kind != kind:
        raise ValueError(f"a {task} input is not {kind}")
    return f"data:{s.mime};base64,{base64.b64encode(data).decode('ascii')}", s.mime.split("/")[-1]


def video_messages(inputs: Inputs) -> list[dict[str, Any]]:
    """One user message: the question, then the video as a ``video_url`` part holding a ``data:``
    URI (the OpenAI-compatible extension vLLM-based providers read; never a URL of ours)."""
    uri, _ = _media_uri(inputs.media["video"], "video", VIDEO_VLM_TASK)
    content = [{"type": "text", "text": inputs.text["text"]}, {"type": "video_url", "video_url": {"url": uri}}]
    return [{"role": "user", "content": content}]


def audio_messages(inputs: Inputs) -> list[dict[str, Any]]:
    """One user message: the question, then the audio as an ``input_audio`` part (OpenAI's chat
    format: base64 ``data`` and its ``format``, the sniffed subtype: ``wav``, ``mpeg``, ``flac``...)."""
    uri, subtype = _media_uri(inputs.media["audio"], "audio", AUDIO_LM_TASK)
    fmt = {"mpeg": "mp3", "x-wav": "wav", "wave": "wav"}.get(subtype, subtype)
    content = [{"type": "text", "text": inputs.text["text"]},
               {"type": "input_audio", "input_audio": {"data": uri.partition(",")[2], "format": fmt}}]
    return [{"role": "user", "content": content}]


TASKS: list[TaskSpec] = [
    entry(VLM_TASK, "multimodal", {"image": "image", "text": "text"}, ("text",),
          "answer an open question or instruction (text) about one or several images (image, image2..image4): "
          "photos, charts, screenshots, document pages", _call, _answer,
          optional={k: "image" for k in EXTRA_IMAGES}),
    entry(VIDEO_VLM_TASK, "multimodal", {"video": "video", "text": "text"}, ("text",),
          "answer a question (text) about a whole video, watching it (what happens, in which order)",
          lambda c, m, i: c.chat_completion(video_messages(i), model=m, max_tokens=MAX_ANSWER_TOKENS), _answer),
    entry(AUDIO_LM_TASK, "multimodal", {"audio": "audio", "text": "text"}, ("text",),
          "answer a question (text) about a recording, listening to it (speech, tone, sounds, music)",
          lambda c, m, i: c.chat_completion(audio_messages(i), model=m, max_tokens=MAX_ANSWER_TOKENS), _answer),
]
