"""Video tasks (HuggingGPT Table 1, video), one registry entry each."""

from __future__ import annotations

from typing import Any


from ..media import sniff
from ..types import Output
from .base import Inputs, Saver, TaskSpec, entry


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


TASKS: list[TaskSpec] = [
    entry("text-to-video", "video", {"text": "text"}, ("video",), "make a short video from a description",
          _text_to_video, _video, reply="media"),
]
