"""ControlNet tasks of the reference implementation (lllyasviel/sd-controlnet-*): ``<cond>-control``
extracts a condition image, ``<cond>-text-to-image`` draws a new image from it and a text.

``canny-control`` needs no model: the edge map is computed locally with OpenCV
(:mod:`pipeline.experts.local`), as the reference implementation's annotator does.
"""

from __future__ import annotations

from PIL import Image

from ..types import Output
from .base import Inputs, Normalise, Saver, TaskSpec, entry

CONTROLNET_CONDITIONS: tuple[str, ...] = ("canny", "depth", "hed", "mlsd", "normal", "openpose", "scribble", "seg")
"""The conditions of the reference implementation."""


def _condition_image(cond: str) -> Normalise:
    async def normalise(raw: Image.Image | bytes, inputs: Inputs, saver: Saver) -> Output:
        return Output(files=[await saver.image(raw, f"{cond} condition image")])

    return normalise


def _drawn_image(cond: str) -> Normalise:
    async def normalise(raw: Image.Image, inputs: Inputs, saver: Saver) -> Output:
        what = f"image drawn from the {cond} condition: {inputs.text.get('text', '')[:60]}"
        return Output(files=[await saver.image(raw, what)])

    return normalise


TASKS: list[TaskSpec] = []
for _cond in CONTROLNET_CONDITIONS:
    TASKS.append(entry(
        f"{_cond}-control", "controlnet", {"image": "image"}, ("image",),
        f"extract the {_cond} condition image (for {_cond}-text-to-image)",
        None if _cond == "canny" else (lambda c, m, i: c.image_to_image(i.media["image"], model=m)),
        _condition_image(_cond), local=(_cond == "canny"), reply="media",
    ))
    TASKS.append(entry(
        f"{_cond}-text-to-image", "controlnet", {"image": "image", "text": "text"}, ("image",),
        f"draw a new image that follows a {_cond} condition image and a text",
        lambda c, m, i: c.image_to_image(i.media["image"], prompt=i.text["text"], model=m),
        _drawn_image(_cond), reply="media",
    ))
