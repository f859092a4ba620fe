"""Video tasks (HuggingGPT Table 1, video), one registry entry each."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from huggingface_hub import VideoClassificationOutputElement

from ..media import sniff
from ..types import Output
from .base import Inputs, Normalise, Saver, TaskSpec, entry, labels_output


def _text_to_video(c: Any, model: str, inputs: Inputs) -> Any:
    # A dedicated endpoint or gateway answers the raw bytes; Inference Providers go through the client.
    if model.startswith(("http://", "https://")):
        return c.post_raw("text-to-video", model, json={"inputs": inputs.text["text"]})
    return c.text_to_video(inputs.text["text"], model=model)


async def _video(raw: bytes | tuple[bytes, str], inputs: Inputs, saver: Saver) -> Output:
    body = raw[0] if isinstance(raw, tuple) else raw
    s = sniff(body)
    if s is None or s.kind != "video":
        raise ValueError("text-to-video output is not a video")
    return Output(files=[await saver.file(body, "video", s.mime, f"video of {inputs.text['text'][:60]!r}")])


async def _video_labels(raw: tuple[bytes, str], inputs: Inputs, saver: Saver) -> Output:
    """The labels of a ``video-classification`` answer: a JSON list of ``{label, score}``
    (Hugging Face inference wire format, ``VideoClassificationOutputElement``).

    Raises:
        ValueError: the answer is not such a list.
    """
    body, ctype = raw
    if "json" not in ctype:
        raise ValueError(f"video-classification answered {ctype or 'no content type'}, not JSON labels")
    return await labels_output(VideoClassificationOutputElement.parse_obj_as_list(body), inputs, saver)


def _image_to_video(c: Any, model: str, inputs: Inputs) -> Any:
    prompt = inputs.text.get("text")
    if model.startswith(("http://", "https://")):
        return c.post_raw("image-to-video", model, data=inputs.media["image"])
    return c.image_to_video(inputs.media["image"], model=model, prompt=prompt)


async def _animated(raw: Any, inputs: Inputs, saver: Saver) -> Output:
    body = raw[0] if isinstance(raw, tuple) else raw
    s = sniff(body)
    if s is None or s.kind != "video":
        raise ValueError("image-to-video output is not a video")
    source = inputs.resources.get("image")
    what = f"video animating {source.id}" if source is not None else "video from an image"
    prompt = inputs.text.get("text")
    return Output(files=[await saver.file(body, "video", s.mime, f"{what}" + (f": {prompt[:60]!r}" if prompt else ""))])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _image_text_to_video(c: Any, model: str, inputs: Inputs) -> Any:
    """``image-text-to-video``: ``ImageTextToVideoInput`` (base64 image in ``inputs``, the
    description in ``parameters.prompt``) to an endpoint or expert server; on Inference Providers
    the client's ``image_to_video`` with the prompt (huggingface_hub 2.4 has no
    ``image_text_to_video`` method; providers serve these models through that helper)."""
    image, prompt = inputs.media["image"], inputs.text["text"]
    if model.startswith(("http://", "https://")):
        return c.post_raw("image-text-to-video", model, json={"inputs": _b64(image), "parameters": {"prompt": prompt}})
    return c.image_to_video(image, model=model, prompt=prompt)


def _video_to_video(c: Any, model: str, inputs: Inputs) -> Any:
    """``video-to-video``: base64 video in ``inputs``, the instruction in ``parameters.prompt`` (the
    shape of the Hub's image-text-to-video input), to an endpoint or expert server only: no
    Inference Provider helper of huggingface_hub 2.4 serves it (``post_raw`` says so for a model id)."""
    body = {"inputs": _b64(inputs.media["video"]), "parameters": {"prompt": inputs.text.get("text") or None}}
    return c.post_raw("video-to-video", model, json=body)


def _video_made(task: str, what: Callable[[Inputs], str]) -> Normalise:
    """A normaliser storing a generated video (bytes, or ``(bytes, content type)``) as ``what(inputs)``."""

    async def normalise(raw: Any, inputs: Inputs, saver: Saver) -> Output:
        body = raw[0] if isinstance(raw, tuple) else raw
        s = sniff(body) if isinstance(body, bytes) else None
        if s is None or s.kind != "video":
            raise ValueError(f"{task} output is not a video")
        return Output(files=[await saver.file(body, "video", s.mime, what(inputs))])

    return normalise


TASKS: list[TaskSpec] = [
    entry("text-to-video", "video", {"text": "text"}, ("video",), "make a short video from a description",
          _text_to_video, _video, reply="media"),
    # No client method and no provider serves it today: a local expert server or a dedicated endpoint does.
    entry("video-classification", "video", {"video": "video"}, ("text",), "name what happens in a video",
          lambda c, m, i: c.post_raw("video-classification", m, data=i.media["video"]), _video_labels),
    entry("image-to-video", "video", {"image": "image"}, ("video",),
          "animate an image into a short video, optionally guided by a description (text)",
          _image_to_video, _animated, optional={"text": "text"}, reply="media"),
    entry("image-text-to-video", "video", {"image": "image", "text": "text"}, ("video",),
          "make a short video that starts from an image and follows a description (text) of what happens",
          _image_text_to_video,
          _video_made("image-text-to-video", lambda i: f"video from {i.resources['image'].id}: {i.text['text'][:60]!r}"),
          reply="media"),
    entry("video-to-video", "video", {"video": "video"}, ("video",),
          "transform a video as an instruction (text) says: restyle, edit, extend",
          _video_to_video,
          _video_made("video-to-video", lambda i: f"{i.resources['video'].id} transformed"
                      + (f" as {i.text['text'][:60]!r}" if i.text.get("text") else "")),
          optional={"text": "text"}, reply="media"),
]
