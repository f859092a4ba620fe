"""Image tasks (HuggingGPT Table 1, CV), one registry entry each."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any, Union

from huggingface_hub import (
    DocumentQuestionAnsweringOutputElement,
    ImageSegmentationOutputElement,
    ObjectDetectionOutputElement,
    VisualQuestionAnsweringOutputElement,
)
from PIL import Image

from ..media import check_pixels, sniff
from . import drawing
from ..types import Output
from .base import Inputs, Saver, TaskSpec, best, entry, flatten, labels_output, summary, text_of
from .outputs import Answer, Answers, DetectedObject, Label, Objects, Segments

IMAGE = {"image": "image"}
QuestionAnswers = Union[
    VisualQuestionAnsweringOutputElement, DocumentQuestionAnsweringOutputElement,
    list[VisualQuestionAnsweringOutputElement], list[DocumentQuestionAnsweringOutputElement],
]
"""What the client answers for a question about an image or a document image."""
IMAGE_AND_TEXT = {"image": "image", "text": "text"}


async def _object_detection(raw: list[ObjectDetectionOutputElement], inputs: Inputs, saver: Saver) -> Output:
    limits = saver.limits
    found = best(raw, limits.max_items, lambda x: float(x.score))
    objects = [
        DetectedObject(str(x.label), float(x.score), (int(x.box.xmin), int(x.box.ymin), int(x.box.xmax), int(x.box.ymax)))
        for x in found
    ]
    drawable = [{"label": o.label, "score": o.score, "box": list(o.box)} for o in objects]
    png = await drawing.in_thread(drawing.draw_boxes, inputs.media["image"], drawable, max_pixels=limits.max_image_pixels)
    pairs = [(o.label, o.score) for o in objects]
    short = summary(pairs, limit=3) if objects else "none"
    res = await saver.image(png, f"{inputs.resources['image'].id} with {len(objects)} boxes drawn: {short}")
    return Output(text=summary(pairs) if objects else "no objects found", files=[res], data=Objects(tuple(objects)))


async def _text_to_image(raw: Image.Image, inputs: Inputs, saver: Saver) -> Output:
    return Output(files=[await saver.image(raw, f"image of {inputs.text['text'][:60]!r}")])


async def _image_to_image(raw: Image.Image, inputs: Inputs, saver: Saver) -> Output:
    prompt = inputs.text.get("text")
    what = f"{inputs.resources['image'].id} edited" + (f" as {prompt[:60]!r}" if prompt else "")
    return Output(files=[await saver.image(raw, what)])


def _instruction_edit(c: Any, model: str, inputs: Inputs) -> Any:
    """``image-text-to-image``: the Hugging Face wire format (``ImageTextToImageInput``: base64
    image in ``inputs``, the instruction in ``parameters.prompt``) to an endpoint or expert server;
    on Inference Providers the client's ``image_to_image`` with the prompt (huggingface_hub 2.4 has
    no ``image_text_to_image`` method; providers map instruction-edit models to that helper)."""
    image, prompt = inputs.media["image"], inputs.text["text"]
    if model.startswith(("http://", "https://")):
        body = {"inputs": base64.b64encode(image).decode("ascii"), "parameters": {"prompt": prompt}}
        return c.post_raw("image-text-to-image", model, json=body)
    return c.image_to_image(image, prompt=prompt, model=model)


async def _edited(raw: Image.Image | tuple[bytes, str], inputs: Inputs, saver: Saver) -> Output:
    """The edited image of ``image-text-to-image``: a PIL image (the client) or ``(bytes, content
    type)`` (a raw answer); raises ``ValueError`` when the bytes are not an image."""
    if isinstance(raw, tuple):
        s = sniff(raw[0])
        if s is None or s.kind != "image":
            raise ValueError("image-text-to-image output is not an image")
        raw = raw[0]
    what = f"{inputs.resources['image'].id} edited as {inputs.text['text'][:60]!r}"
    return Output(files=[await saver.image(raw, what)])


async def _image_segmentation(raw: list[ImageSegmentationOutputElement], inputs: Inputs, saver: Saver) -> Output:
    limits = saver.limits
    found = best(raw, limits.max_items, lambda x: None if x.score is None else float(x.score))
    segments = [(str(x.label), None if x.score is None else float(x.score), x.mask) for x in found]
    png = await drawing.in_thread(drawing.overlay_masks, inputs.media["image"], segments, max_pixels=limits.max_image_pixels)
    pairs = [(label, score) for label, score, _ in segments]
    short = summary(pairs, limit=3) if segments else "none"
    drawn = min(len(segments), drawing.MASKS_DRAWN)
    shown = f"{len(segments)} masks" if drawn == len(segments) else f"the best {drawn} of {len(segments)} masks"
    res = await saver.image(png, f"{inputs.resources['image'].id} with {shown}: {short}")
    text = summary(pairs) if segments else "no segments found"
    return Output(text=text, files=[res], data=Segments(tuple(Label(label, score) for label, score in pairs)))


async def _depth_estimation(raw: tuple[bytes, str], inputs: Inputs, saver: Saver) -> Output:
    body, ctype = raw
    if ctype.startswith("image/"):
        img = body
    else:
        obj = json.loads(body)
        if isinstance(obj, list):
            obj = obj[0]
        if obj.get("depth"):
            img = base64.b64decode(obj["depth"])
        elif obj.get("predicted_depth") is not None:
            import numpy as np  # loaded with the first depth map, not with the task registry

            depth = np.squeeze(np.asarray(obj["predicted_depth"], dtype="float32"))
            if depth.ndim != 2:
                raise ValueError(f"predicted_depth of shape {depth.shape}, not a 2-D map")
            check_pixels((depth.shape[1], depth.shape[0]), saver.limits.max_image_pixels)
            img = await asyncio.to_thread(drawing.depth_to_png, depth)
        else:
            raise ValueError("depth output without 'depth' or 'predicted_depth'")
    pixels = saver.limits.max_image_pixels
    png = await asyncio.to_thread(lambda: drawing.to_png(drawing.open_rgb(img, pixels)))
    return Output(files=[await saver.image(png, f"depth map of {inputs.resources['image'].id}")])


async def _answers(raw: QuestionAnswers, inputs: Inputs, saver: Saver) -> Output:
    answers = [Answer(str(x.answer), None if x.score is None else float(x.score)) for x in flatten(raw)]
    answers = answers[: saver.limits.max_items]
    if not answers:
        raise ValueError("no answers")
    return Output(text=answers[0].answer, data=Answers(tuple(answers)))


TASKS: list[TaskSpec] = [
    entry("object-detection", "vision", IMAGE, ("image", "text"), "find and box objects in an image",
          lambda c, m, i: c.object_detection(i.media["image"], model=m), _object_detection),
    entry("image-classification", "vision", IMAGE, ("text",), "name what an image shows",
          lambda c, m, i: c.image_classification(i.media["image"], model=m), labels_output),
    entry("image-to-text", "vision", IMAGE, ("text",), "describe an image in a sentence",
          lambda c, m, i: c.image_to_text(i.media["image"], model=m), text_of("generated_text")),
    entry("text-to-image", "vision", {"text": "text"}, ("image",), "make an image from a description",
          lambda c, m, i: c.text_to_image(i.text["text"], model=m), _text_to_image, reply="media"),
    entry("image-to-image", "vision", IMAGE, ("image",), "edit an image as the text says",
          lambda c, m, i: c.image_to_image(i.media["image"], prompt=i.text.get("text") or None, model=m),
          _image_to_image, optional={"text": "text"}, reply="media"),
    entry("image-text-to-image", "vision", IMAGE_AND_TEXT, ("image",),
          "edit an image by an instruction (text), keeping what the instruction does not change",
          _instruction_edit, _edited, reply="media"),
    entry("image-segmentation", "vision", IMAGE, ("image", "text"), "split an image into labelled regions (masks)",
          lambda c, m, i: c.image_segmentation(i.media["image"], model=m), _image_segmentation, reply="media-json"),
    entry("depth-estimation", "vision", IMAGE, ("image",), "estimate a depth map of an image",
          lambda c, m, i: c.post_raw("depth-estimation", m, data=i.media["image"]), _depth_estimation, reply="media"),
    entry("visual-question-answering", "vision", IMAGE_AND_TEXT, ("text",), "answer a question (text) about an image",
          lambda c, m, i: c.visual_question_answering(i.media["image"], i.text["text"], model=m), _answers),
    entry("document-question-answering", "vision", IMAGE_AND_TEXT, ("text",),
          "answer a question (text) about a document image",
          lambda c, m, i: c.document_question_answering(i.media["image"], i.text["text"], model=m), _answers),
]
