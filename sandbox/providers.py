"""What the inference stand-in (:mod:`sandbox.inference`) knows of today's Inference Providers:
the router's routes, the billing header, out-of-credit accounts, VLM answers and image-to-video.

Routes (the paths ``huggingface_hub`` 2.4 builds under ``router.huggingface.co``, reached through
``[inference] router_url``):

* ``POST /{provider}/models/{id}`` — a provider in the ``hf-inference`` wire format;
* ``POST /v1/chat/completions`` — the router's auto route; the body's ``model`` may end in
  ``:fastest`` / ``:cheapest`` / ``:preferred`` / ``:<provider>``;
* ``POST /{provider}/v1/chat/completions`` — one provider's OpenAI-compatible route.

Billing: the ``X-HF-Bill-To`` header names the paying organisation (none: the token's owner,
called ``""`` here); an account in ``no_credits`` gets 402 with the message providers send.
"""

from __future__ import annotations

import asyncio
import base64
import io
import re
from typing import Any

from PIL import Image

from .audio_video import SAMPLE_RATE, decode_audio, make_video, motion_labels, wav_comment
from .faults import Fault
from .imaging import describe_image, open_image, png, transform

BILL_HEADER = "X-HF-Bill-To"
"""The header naming the organisation billed (``huggingface_hub.constants.HUGGINGFACE_HEADER_X_BILL_TO``)."""

_DATA_URI = re.compile(r"^data:image/[a-z0-9.+-]+;base64,(.+)$", re.S)
_VIDEO_URI = re.compile(r"^data:video/[a-z0-9.+-]+;base64,(.+)$", re.S)


def check_credits(headers: Any, no_credits: set[str]) -> str:
    """The account billed by a request (``X-HF-Bill-To``, ``""`` for the token's owner).

    Raises:
        Fault: 402 when that account is in ``no_credits``.
    """
    account = headers.get(BILL_HEADER, "")
    if account in no_credits:
        who = account or "your account"
        raise Fault(402, {"error": f"You have exceeded your monthly included credits for Inference Providers ({who}). "
                                   "Subscribe to PRO or add credits to continue."})
    return account


def split_router_model(model: str) -> tuple[str, str | None]:
    """``"org/m:fastest"`` → ``("org/m", "fastest")``; no suffix → ``(model, None)``."""
    if ":" in model:
        base, _, suffix = model.rpartition(":")
        return base, suffix
    return model, None


def _images(content: list[Any]) -> list[Image.Image]:
    out = []
    for part in content:
        url = (part.get("image_url") or {}).get("url", "") if isinstance(part, dict) else ""
        m = _DATA_URI.match(url)
        if m is None:
            continue  # a plain URL is never fetched by the stand-in either
        try:
            out.append(Image.open(io.BytesIO(base64.b64decode(m.group(1)))).convert("RGB"))
        except Exception as exc:  # noqa: BLE001 - the client sent a broken image
            raise Fault(400, {"error": f"image_url is not a readable image ({exc.__class__.__name__})"}) from exc
    return out


async def vlm_reply(content: Any) -> str | None:
    """The stand-in VLM's answer to a user message with images, or ``None`` when it has none.

    The answer repeats the question and describes each image from its pixels (size, main colour,
    light), so tests can follow it through later tasks.
    """
    if not isinstance(content, list):
        return None
    images = await asyncio.to_thread(_images, content)
    if not images:
        return None
    question = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text").strip()
    seen = "; ".join(f"image {n}: {describe_image(im)}" for n, im in enumerate(images, 1))
    return f"[sandbox vlm] {question} -> {seen}"


async def media_reply(content: Any) -> str | None:
    """The stand-in's answer to a user message with a ``video_url`` part (a video VLM) or an
    ``input_audio`` part (an audio language model), or ``None`` when it has neither.

    What it says is read from the media: a video's motion (:func:`sandbox.audio_video.motion_labels`),
    the seconds of a recording and the text a stand-in WAV carries.

    Raises:
        Fault: 400 for a part that is not a readable ``data:`` video or base64 audio (the stand-in
            never fetches a URL).
    """
    if not isinstance(content, list):
        return None
    question = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text").strip()
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "video_url":
            m = _VIDEO_URI.match(str((part.get("video_url") or {}).get("url", "")))
            if m is None:
                raise Fault(400, {"error": "video_url must be a data:video URI here"})
            try:
                labels = await motion_labels(base64.b64decode(m.group(1)))
            except ValueError as exc:
                raise Fault(400, {"error": f"video_url is not a readable video ({exc})"}) from exc
            return f"[sandbox video vlm] {question} -> watched a {labels[0]['label']}"
        if part.get("type") == "input_audio":
            audio = base64.b64decode(str((part.get("input_audio") or {}).get("data", "")))
            said = wav_comment(audio)
            samples = await decode_audio(audio)
            heard = f"{len(samples) / SAMPLE_RATE:.1f} s of audio" + (f" saying {said!r}" if said else "")
            return f"[sandbox audio lm] {question} -> heard {heard}"
    return None


async def image_to_video(image: bytes) -> bytes:
    """A short MP4 coloured after the image's main colour."""
    try:
        with Image.open(io.BytesIO(image)) as im:
            words = describe_image(im.convert("RGB"))
    except Exception as exc:  # noqa: BLE001
        raise Fault(400, {"error": "image-to-video expects an image"}) from exc
    return await make_video(words)


class FalQueue:
    """fal-ai's queue API as ``huggingface_hub`` 2.4 calls it through the router (its
    ``FalAIQueueTask``): ``POST /fal-ai/{app}?_subdomain=queue`` answers ``request_id``, ``status``
    and ``response_url``; the client polls ``GET /fal-ai/{app}/requests/{id}/status`` until
    ``COMPLETED``, reads ``GET /fal-ai/{app}/requests/{id}`` (``{"video": {"url": ...}}``) and
    downloads that URL (``https://v3.fal.media/files/...``, served here as ``/files/{name}``).

    Served: ``image-to-video`` (``image_url`` as a data URI), ``text-to-video`` (``prompt``) and
    ``image-to-image`` (``image_url`` and ``image_urls``, answered ``{"images": [{"url"}]}``).
    ``polls`` is how many status answers say ``IN_PROGRESS`` before ``COMPLETED``.
    """

    def __init__(self, note: Any, polls: int = 1) -> None:
        self.note = note  # called (model, task, status, provider, bill_to, asked) for each submission
        self.polls = polls
        self.files: dict[str, bytes] = {}
        self._waiting: dict[str, int] = {}

    def add_routes(self, app: Any) -> None:
        """Register the queue's routes on an aiohttp application (before catch-all routes)."""
        from aiohttp import web

        app.router.add_get("/fal-ai/{app:.+}/requests/{rid}/status", self._status)
        app.router.add_get("/fal-ai/{app:.+}/requests/{rid}", self._result)
        app.router.add_get("/files/{name}", self._file)
        app.router.add_post("/fal-ai/{app:.+}", self._submit)
        self._web = web

    async def _submit(self, request: Any) -> Any:
        web, model = self._web, request.match_info["app"]
        payload = await request.json()
        bill_to = request.headers.get(BILL_HEADER, "")
        prompt = str(payload.get("prompt") or "")
        image_url = str(payload.get("image_url") or "")
        if payload.get("image_urls"):  # FalAIImageToImageTask sends both; the video helpers image_url only
            return await self._edit(model, image_url, prompt, bill_to)
        task = "image-to-video" if image_url else "text-to-video"
        m = _DATA_URI.match(image_url)
        if image_url and m is None:  # the stand-in never fetches a URL
            self.note(model, task, 400, "fal-ai", bill_to, prompt)
            return web.json_response({"detail": "image_url must be a data URI here"}, status=400)
        video = await (image_to_video(base64.b64decode(m.group(1))) if m else make_video(prompt or "video"))
        rid = f"req-{len(self.files) + 1}"
        self.files[f"{rid}.mp4"] = video
        self._waiting[rid] = self.polls
        self.note(model, task, 200, "fal-ai", bill_to, prompt)
        return web.json_response({"request_id": rid, "status": "IN_QUEUE",
                                  "response_url": f"https://queue.fal.run/{model}/requests/{rid}"})

    async def _edit(self, model: str, image_url: str, prompt: str, bill_to: str) -> Any:
        """An image-to-image submission: the edited PNG is kept as ``{rid}.png`` for the result."""
        web, m = self._web, _DATA_URI.match(image_url)
        if m is None:
            self.note(model, "image-to-image", 400, "fal-ai", bill_to, prompt)
            return web.json_response({"detail": "image_url must be a data URI here"}, status=400)
        im = await asyncio.to_thread(open_image, base64.b64decode(m.group(1)))
        rid = f"req-{len(self.files) + 1}"
        self.files[f"{rid}.png"] = await asyncio.to_thread(lambda: png(transform(im, prompt)))
        self._waiting[rid] = self.polls
        self.note(model, "image-to-image", 200, "fal-ai", bill_to, prompt)
        return web.json_response({"request_id": rid, "status": "IN_QUEUE",
                                  "response_url": f"https://queue.fal.run/{model}/requests/{rid}"})

    async def _status(self, request: Any) -> Any:
        rid = request.match_info["rid"]
        left = self._waiting.get(rid, 0)
        self._waiting[rid] = max(0, left - 1)
        return self._web.json_response({"status": "IN_PROGRESS" if left > 0 else "COMPLETED"})

    async def _result(self, request: Any) -> Any:
        rid = request.match_info["rid"]
        if f"{rid}.png" in self.files:  # fal's image answer: {"images": [{"url", "content_type"}]}
            return self._web.json_response({"images": [{"url": f"https://v3.fal.media/files/{rid}.png",
                                                        "content_type": "image/png"}]})
        return self._web.json_response({"video": {"url": f"https://v3.fal.media/files/{rid}.mp4",
                                                  "content_type": "video/mp4"}})

    async def _file(self, request: Any) -> Any:
        name = request.match_info["name"]
        body = self.files.get(name)
        if body is None:
            return self._web.json_response({"detail": "not found"}, status=404)
        return self._web.Response(body=body, content_type="image/png" if name.endswith(".png") else "video/mp4")
