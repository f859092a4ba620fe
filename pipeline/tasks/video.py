"""Video tasks (HuggingGPT Table 1, video), one registry entry each."""

from __future__ import annotations

from typing import Any

from huggingface_hub import VideoClassificationOutputElement

from ..media import sniff
from ..types import Output
from .base import Inputs, Saver, TaskSpec, entry, labels_output


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


TASKS: list[TaskSpec] = [
    entry("text-to-video", "video", {"text": "text"}, ("video",), "make a short video from a description",
          _text_to_video, _video, reply="media"),
    # No client method and no provider serves it today: a local expert server or a dedicated endpoint does.
    entry("video-classification", "video", {"video": "video"}, ("text",), "name what happens in a video",
          lambda c, m, i: c.post_raw("video-classification", m, data=i.media["video"]), _video_labels),
    entry("image-to-video", "video", {"image": "image"}, ("video",),
          "animate an image into a short video, optionally guided by a description (text)",
          _image_to_video, _animated, optional={"text": "text"}, reply="media"),
]
