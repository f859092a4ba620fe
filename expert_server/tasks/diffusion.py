"""diffusers tasks: text-to-image, image-to-image, image-text-to-image (instruction edits),
text-to-video, image-text-to-video, video-to-video (a video redrawn as a prompt says, its frames decoded bounded by
:func:`expert_server.payload.video_frames`), and ControlNet generation
(``<cond>-text-to-image``: a ControlNet checkpoint on the Stable Diffusion base named by the
server's ``controlnet_base``). Images come back as PNG (image-to-image and ControlNet at the input
image's size, scaled down to ``max_output_pixels`` when it is larger), video as MP4."""

from __future__ import annotations

import io
from typing import Any

from .. import payload as P
from ..errors import BadPayload, TooLarge
from . import Binary, Task
from .common import torch_device

MAX_STEPS = 200
MAX_SIDE = 2048
MIN_IMAGE_STEPS = 2  # image-to-image runs steps x strength (0.8 by default) steps: one step would be none


def _load_text2image(model: Any, device: str) -> Any:
    from diffusers import AutoPipelineForText2Image, DiffusionPipeline

    try:
        pipe = AutoPipelineForText2Image.from_pretrained(str(model.path))
    except ValueError:  # a pipeline class AutoPipeline does not map
        pipe = DiffusionPipeline.from_pretrained(str(model.path))
    return _ready(pipe, device)


def _load_image2image(model: Any, device: str) -> Any:
    from diffusers import AutoPipelineForImage2Image, DiffusionPipeline

    cls = str(model.architectures[0]) if model.architectures else ""
    if "Img2Img" in cls or "Pix2Pix" in cls or "Variation" in cls:
        return _ready(DiffusionPipeline.from_pretrained(str(model.path)), device)
    return _ready(AutoPipelineForImage2Image.from_pretrained(str(model.path)), device)


def _load_video(model: Any, device: str) -> Any:
    from diffusers import DiffusionPipeline

    return _ready(DiffusionPipeline.from_pretrained(str(model.path)), device)


def _load_controlnet(model: Any, device: str) -> Any:
    from diffusers import ControlNetModel, StableDiffusionControlNetPipeline

    if model.base is None:
        raise FileNotFoundError("the Stable Diffusion base model is not in the cache")
    controlnet = ControlNetModel.from_pretrained(str(model.path))
    pipe = StableDiffusionControlNetPipeline.from_pretrained(str(model.base), controlnet=controlnet)
    return _ready(pipe, device)


def _ready(pipe: Any, device: str) -> Any:
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(torch_device(device))


def _common(p: P.Payload) -> dict:
    opts: dict[str, Any] = {}
    steps = P.param(p, "num_inference_steps", int)
    if steps is not None:
        if not 1 <= steps <= MAX_STEPS:
            raise BadPayload("parameters.num_inference_steps", f"must be between 1 and {MAX_STEPS}")
        opts["num_inference_steps"] = steps
    for name, kind in (("guidance_scale", (int, float)), ("negative_prompt", str), ("seed", int)):
        value = P.param(p, name, kind)
        if value is not None:
            opts[name] = value
    return opts


def _size(p: P.Payload, name: str) -> int | None:
    value = P.param(p, name, int)
    if value is not None and not 8 <= value <= MAX_SIDE:
        raise BadPayload(f"parameters.{name}", f"must be between 8 and {MAX_SIDE} pixels")
    return value


def _text2image_prepare(p: P.Payload) -> tuple[Any, dict]:
    """A prompt; or, when the body is an image with ``parameters.prompt`` (the client's
    ``image_to_image``), an image-to-image request on the same checkpoint."""
    if p.raw is not None or "prompt" in p.parameters:
        img, opts = _image_prompt_prepare(p)
        return img, {**opts, "image_to_image": True}
    opts = _common(p)
    for name in ("width", "height"):
        value = _size(p, name)
        if value is not None:
            opts[name] = value - value % 8
    limit = p.limits.max_output_pixels if p.limits is not None else None
    if limit is not None and opts.get("width", 8) * opts.get("height", 8) > limit:
        raise TooLarge("parameters.width", f"and height ask for {opts['width']}x{opts['height']} pixels",
                       f"max_output_pixels = {limit}")
    return P.text(p), opts


def _image_prompt_prepare(p: P.Payload) -> tuple[Any, dict]:
    img = P.image(p)
    opts = _common(p)
    if opts.get("num_inference_steps", MIN_IMAGE_STEPS) < MIN_IMAGE_STEPS:  # ControlNet too: a step is too few
        raise BadPayload("parameters.num_inference_steps", f"must be at least {MIN_IMAGE_STEPS} for a drawing from "
                                                           "an image")
    prompt = P.param(p, "prompt", str)
    if not prompt:
        raise BadPayload("parameters.prompt", "must be a non-empty string")
    opts["prompt"] = prompt
    if p.limits is not None:
        opts["max_pixels"] = p.limits.max_output_pixels
    return img, opts


def _generator(opts: dict) -> Any:
    import torch

    seed = opts.pop("seed", None)
    return None if seed is None else torch.Generator().manual_seed(seed)


def _text2image_run(pipe: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    out = []
    for prompt, opts in items:
        opts = dict(opts)
        if opts.pop("image_to_image", False):
            from diffusers import AutoPipelineForImage2Image

            derived = AutoPipelineForImage2Image.from_pipe(pipe)
            derived.set_progress_bar_config(disable=True)
            out += _image2image_run(derived, [(prompt, opts)])
            continue
        img = pipe(prompt, generator=_generator(opts), **opts).images[0]
        out.append(Binary(P.png(img), "image/png"))
    return out


def fit(size: tuple[int, int], max_pixels: int | None, multiple: int = 8) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(drawn, answered)`` sizes for an input of ``size``: the size the pipeline draws (sides
    multiples of ``multiple`` pixels, at most ``max_pixels`` pixels, the aspect ratio kept) and the
    size of the answer (the input's, or the drawn one when the input was over ``max_pixels``)."""
    w, h = size
    answered = size
    if max_pixels is not None and w * h > max_pixels:
        scale = (max_pixels / (w * h)) ** 0.5
        w, h = max(1, int(w * scale)), max(1, int(h * scale))
        answered = (max(multiple, w - w % multiple), max(multiple, h - h % multiple))
    drawn = (max(multiple, w - w % multiple), max(multiple, h - h % multiple))
    return drawn, answered


def _image2image_run(pipe: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    out = []
    for img, opts in items:
        opts = dict(opts)
        prompt = opts.pop("prompt")
        drawn, answered = fit(img.size, opts.pop("max_pixels", None))
        res = pipe(prompt=prompt, image=img.resize(drawn), generator=_generator(opts), **opts).images[0]
        out.append(Binary(P.png(res.resize(answered)), "image/png"))
    return out


def _controlnet_run(pipe: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    out = []
    for img, opts in items:
        opts = dict(opts)
        prompt = opts.pop("prompt")
        (w, h), answered = fit(img.size, opts.pop("max_pixels", None))
        res = pipe(prompt=prompt, image=img.resize((w, h)), width=w, height=h, generator=_generator(opts),
                   **opts).images[0]
        out.append(Binary(P.png(res.resize(answered)), "image/png"))
    return out


def _video_run(pipe: Any, items: list[tuple[str, dict]]) -> list[Binary]:
    out = []
    for prompt, opts in items:
        opts = dict(opts)
        frames = pipe(prompt, generator=_generator(opts), output_type="np", **opts).frames[0]
        out.append(Binary(_mp4(frames), "video/mp4"))
    return out


def _mp4(frames: Any, fps: int = 8) -> bytes:
    """Frames (float RGB in [0, 1], shape frames × height × width × 3) as H.264 MP4 (PyAV)."""
    import av
    import numpy as np

    buf = io.BytesIO()
    arr = (np.clip(np.asarray(frames), 0, 1) * 255).astype("uint8")
    h, w = arr.shape[1] - arr.shape[1] % 2, arr.shape[2] - arr.shape[2] % 2
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for frame in arr:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame[:h, :w], format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def _video2video_prepare(p: P.Payload) -> tuple[Any, dict]:
    """The frames of the base64 video in ``inputs`` and the optional ``parameters.prompt`` (the
    bot's client sends the Hub's image-text-to-video input shape with a video)."""
    frames = P.video_frames(p, "inputs", p.inputs)
    opts = _common(p)
    if opts.get("num_inference_steps", MIN_IMAGE_STEPS) < MIN_IMAGE_STEPS:  # strength x steps: one step is none
        raise BadPayload("parameters.num_inference_steps", f"must be at least {MIN_IMAGE_STEPS} for a drawing from "
                                                           "a video")
    opts["prompt"] = P.param(p, "prompt", str, "")
    if p.limits is not None:
        opts["max_pixels"] = p.limits.max_output_pixels
    return frames, opts


def _video2video_run(pipe: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    """MP4s of the frames redrawn, at the frames' size (sides multiples of 8, within
    ``max_output_pixels``)."""
    out = []
    for frames, opts in items:
        opts = dict(opts)
        drawn, _ = fit(frames[0].size, opts.pop("max_pixels", None))
        video = [f.resize(drawn) for f in frames]
        made = pipe(opts.pop("prompt"), video=video, generator=_generator(opts), output_type="np", **opts).frames[0]
        out.append(Binary(_mp4(made), "video/mp4"))
    return out


MAX_FRAMES = 257  # frames image-text-to-video may be asked to draw (LTX-Video's longest clip, about 10 s)
VIDEO_MULTIPLE = 32  # pixels: image-to-video transformers (LTX-Video) take sides that are multiples of 32


def _image2video_prepare(p: P.Payload) -> tuple[Any, dict]:
    """The image and ``parameters.prompt`` (the Hub's ``ImageTextToVideoInput``), with an optional
    ``parameters.num_frames`` (1 to :data:`MAX_FRAMES`)."""
    img, opts = _image_prompt_prepare(p)
    frames = P.param(p, "num_frames", int)
    if frames is not None:
        if not 1 <= frames <= MAX_FRAMES:
            raise BadPayload("parameters.num_frames", f"must be between 1 and {MAX_FRAMES}")
        opts["num_frames"] = frames
    return img, opts


def _image2video_run(pipe: Any, items: list[tuple[Any, dict]]) -> list[Binary]:
    """MP4s of videos starting from each image, drawn at its size within ``max_output_pixels``
    (sides multiples of :data:`VIDEO_MULTIPLE`)."""
    out = []
    for img, opts in items:
        opts = dict(opts)
        (w, h), _ = fit(img.size, opts.pop("max_pixels", None), VIDEO_MULTIPLE)
        made = pipe(image=img.resize((w, h)), prompt=opts.pop("prompt"), width=w, height=h,
                    generator=_generator(opts), output_type="np", **opts).frames[0]
        out.append(Binary(_mp4(made), "video/mp4"))
    return out


def _identity(result: Any) -> Any:
    return result


def controlnet_task(name: str) -> Task:
    """The :class:`Task` of ControlNet generation for one condition (``canny-text-to-image``...)."""
    return Task(name, _load_controlnet, _image_prompt_prepare, _controlnet_run, _identity)


TASKS = [
    Task("text-to-image", _load_text2image, _text2image_prepare, _text2image_run, _identity),
    Task("image-to-image", _load_image2image, _image_prompt_prepare, _image2image_run, _identity),
    # instruction edits (InstructPix2Pix and the like, cards tagged image-text-to-image): the same
    # image + prompt payload (``ImageTextToImageInput``) and pipelines as image-to-image
    Task("image-text-to-image", _load_image2image, _image_prompt_prepare, _image2image_run, _identity),
    Task("text-to-video", _load_video, _text2image_prepare, _video_run, _identity),
    Task("video-to-video", _load_video, _video2video_prepare, _video2video_run, _identity),
    Task("image-text-to-video", _load_video, _image2video_prepare, _image2video_run, _identity),
]
