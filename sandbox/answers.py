"""What the inference stand-in answers for each task: one handler per task (or group of tasks
sharing an input), looked up by :func:`respond`.

Inputs and outputs follow the ``hf-inference`` wire formats of ``huggingface_hub`` 2.4 (JSON
``{"inputs", "parameters"}`` or raw bytes in; JSON or raw image/audio/video bytes out). Every
output is derived from the inputs; text outputs start with ``[sandbox]``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from . import providers
from .audio_video import SAMPLE_RATE, decode_audio, make_video, make_wav, motion_labels, pcm_to_wav, wav_comment
from .faults import Fault
from .imaging import (
    boxes, colour_shares, condition, controlnet_draw, depth_map, describe_image, draw_prompt, open_image, png, segments,
    transform,
)
from .text_outputs import best_span, entities, fill_mask, sentiment, similarity


@dataclass(frozen=True)
class Ask:
    """One inference request: the task it is served as, the model id from the URL, the raw body
    and its JSON (``None`` when the body is raw image/audio bytes)."""

    task: str
    model: str
    body: bytes
    payload: Any

    @property
    def inputs(self) -> Any:
        return self.payload.get("inputs") if isinstance(self.payload, dict) else None

    @property
    def params(self) -> Any:
        return (self.payload.get("parameters") or {}) if isinstance(self.payload, dict) else {}

    def text(self) -> str:
        """The text input; :class:`Fault` 400 when ``inputs`` is not a string."""
        if not isinstance(self.inputs, str):
            raise Fault(400, {"error": f"{self.task} expects text inputs"})
        return self.inputs

    def image(self) -> bytes:
        """The image bytes: the raw body, or base64 in ``image`` / ``inputs`` (:class:`Fault` 400
        when missing or not base64)."""
        if self.payload is None:
            return self.body
        src = self.payload.get("image") if isinstance(self.payload, dict) and "image" in self.payload else self.inputs
        if isinstance(src, dict):
            src = src.get("image")
        if not isinstance(src, str):
            raise Fault(400, {"error": f"{self.task} expects an image"})
        try:
            return base64.b64decode(src)
        except ValueError as exc:
            raise Fault(400, {"error": "image is not base64"}) from exc

    def audio(self) -> bytes:
        """The audio bytes: the raw body, or base64 in ``inputs``."""
        return self.body if self.payload is None else base64.b64decode(str(self.inputs or ""))

    async def opened_image(self) -> Any:
        """The image input as a PIL image (decoded off the event loop)."""
        return await asyncio.to_thread(open_image, self.image())


Handler = Callable[[Ask], Awaitable[web.Response]]


def as_json(obj: Any) -> web.Response:
    """``obj`` as hf-inference sends JSON (recordings in tests/fixtures/cassettes):
    ``application/json``, no charset."""
    return web.Response(body=json.dumps(obj).encode(), content_type="application/json")


async def respond(ask: Ask) -> web.Response:
    """The stand-in's response to ``ask``.

    Raises:
        Fault: 400 for a task it does not serve or an input of the wrong kind.
    """
    handler = SERVED.get(ask.task)
    if handler is None and ask.task != "text-to-image":
        if ask.task.endswith("-control"):
            handler = _control
        elif ask.task.endswith("-text-to-image"):
            handler = _controlnet_draw
    if handler is None:
        raise Fault(400, {"error": f"[sandbox] task {ask.task} is not served"})
    return await handler(ask)


# ----------------------------------------------------------------------------------------------
# Text


async def _conversational(ask: Ask) -> web.Response:
    msgs = ask.payload.get("messages") if isinstance(ask.payload, dict) else None
    last = next((m.get("content") for m in reversed(msgs or []) if m.get("role") == "user"), "")
    seen = await providers.vlm_reply(last) or await providers.media_reply(last)
    if seen is not None:
        last = seen
    elif isinstance(last, list):
        last = " ".join(p.get("text", "") for p in last if isinstance(p, dict))
    return as_json({
        "id": "sandbox-1", "object": "chat.completion", "created": int(time.time()), "model": ask.model,
        "system_fingerprint": "sandbox",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": f"[sandbox] reply to: {last}"}}],
        "usage": {"prompt_tokens": len(str(last).split()), "completion_tokens": 5, "total_tokens": len(str(last).split()) + 5},
    })


async def _fill_mask(ask: Ask) -> web.Response:
    opts = ask.params if isinstance(ask.params, dict) else {}
    targets = opts.get("targets")
    return as_json(fill_mask(ask.text(), opts.get("top_k"), [targets] if isinstance(targets, str) else targets))


async def _summarization(ask: Ask) -> web.Response:
    first = re.split(r"(?<=[.!?])\s", ask.text().strip())[0]
    return as_json([{"summary_text": "[sandbox] summary: " + " ".join(first.split()[:25])}])


async def _translation(ask: Ask) -> web.Response:
    # the real API takes the languages as parameters src_lang / tgt_lang (mBART-50, NLLB, M2M-100 codes)
    params = ask.params
    langs = " ".join(f"{k}={params[k]}" for k in ("src_lang", "tgt_lang") if isinstance(params, dict) and params.get(k))
    return as_json([{"translation_text": f"[sandbox] translation{' (' + langs + ')' if langs else ''} of: {ask.text()}"}])


async def _question_answering(ask: Ask) -> web.Response:
    inputs = ask.inputs
    if not isinstance(inputs, dict):
        raise Fault(400, {"error": "question-answering expects question and context"})
    span, s, e = best_span(str(inputs.get("question", "")), str(inputs.get("context", "")))
    return as_json({"answer": f"[sandbox] {span}", "score": 0.5, "start": s, "end": e})


async def _sentence_similarity(ask: Ask) -> web.Response:
    inputs = ask.inputs
    if not isinstance(inputs, dict):
        raise Fault(400, {"error": "sentence-similarity expects source_sentence and sentences"})
    src = str(inputs.get("source_sentence", ""))
    return as_json([similarity(src, str(s)) for s in inputs.get("sentences", [])])


def _row_sums(cols: list[Any]) -> list[float]:
    """Sum of the numeric cells of each row (cells that are not numbers count as 0)."""
    sums = []
    for i in range(len(cols[0])):
        total = 0.0
        for col in cols:
            try:
                total += float(col[i])
            except (ValueError, TypeError, IndexError):
                pass
        sums.append(total)
    return sums


async def _tabular_classification(ask: Ask) -> web.Response:
    table = ask.payload.get("table") if isinstance(ask.payload, dict) else None
    if not isinstance(table, dict) or not table:
        raise Fault(400, {"error": "tabular-classification expects a table"})
    sums = _row_sums(list(table.values()))
    mean = sum(sums) / len(sums) if sums else 0
    return as_json(["above-average" if s > mean else "below-average" for s in sums])


def _json_of(make: Callable[[str], Any]) -> Handler:
    """A handler answering ``make(text input)`` as JSON."""
    async def handler(ask: Ask) -> web.Response:
        return as_json(make(ask.text()))

    return handler


# ----------------------------------------------------------------------------------------------
# Images


def _image_json(make: Callable[[Any], Any]) -> Handler:
    """A handler answering ``make(opened image)`` (run off the event loop) as JSON."""
    async def handler(ask: Ask) -> web.Response:
        im = await ask.opened_image()
        return as_json(await asyncio.to_thread(make, im))

    return handler


def _classes(im: Any) -> list[dict[str, Any]]:
    return [{"label": n, "score": round(s, 4)} for n, s, _ in colour_shares(im)[:5]]


def _caption(im: Any) -> list[dict[str, str]]:
    return [{"generated_text": "[sandbox] " + describe_image(im)}]


def _depth(im: Any) -> dict[str, str]:
    return {"depth": base64.b64encode(png(depth_map(im))).decode()}


async def _visual_question(ask: Ask) -> web.Response:
    im = await ask.opened_image()
    payload, inputs = ask.payload, ask.inputs
    q = payload.get("question") if isinstance(payload, dict) and "question" in payload else (inputs or {}).get("question", "")
    desc = await asyncio.to_thread(describe_image, im)
    ans = f"[sandbox] answer to {q!r}: {desc}"
    if ask.task == "document-question-answering":
        return as_json([{"answer": ans, "score": 0.5, "start": 0, "end": 0}])
    return as_json([{"answer": ans, "score": 0.5}])


def _prompt(ask: Ask) -> Any:
    return ask.params.get("prompt") if isinstance(ask.params, dict) else None


async def _png_of(out: Any) -> web.Response:
    return web.Response(body=await asyncio.to_thread(png, out), content_type="image/png")


async def _image_to_image(ask: Ask) -> web.Response:
    im = await ask.opened_image()
    return await _png_of(await asyncio.to_thread(transform, im, _prompt(ask)))


async def _control(ask: Ask) -> web.Response:
    im = await ask.opened_image()
    return await _png_of(await asyncio.to_thread(condition, im, ask.task.split("-")[0]))


async def _controlnet_draw(ask: Ask) -> web.Response:
    im = await ask.opened_image()
    return await _png_of(await asyncio.to_thread(controlnet_draw, im, str(_prompt(ask) or "")))


async def _text_to_image_b64(ask: Ask) -> web.Response:  # together's OpenAI-style images route
    drawn = await asyncio.to_thread(draw_prompt, str(ask.payload.get("prompt", "")), 256, 256, "PNG")
    return as_json({"data": [{"b64_json": base64.b64encode(drawn).decode()}]})


async def _text_to_image(ask: Ask) -> web.Response:
    t = ask.text()
    w = int(ask.params.get("width") or 512)
    h = int(ask.params.get("height") or 512)
    # hf-inference answers text-to-image with a JPEG even when asked for image/png (recorded)
    return web.Response(body=await asyncio.to_thread(draw_prompt, t, w, h, "JPEG"), content_type="image/jpeg")


# ----------------------------------------------------------------------------------------------
# Audio and video


async def _text_to_speech(ask: Ask) -> web.Response:
    return web.Response(body=await asyncio.to_thread(make_wav, ask.text()), content_type="audio/wav")


async def _image_to_video(ask: Ask) -> web.Response:
    return web.Response(body=await providers.image_to_video(ask.image()), content_type="video/mp4")


async def _text_to_video(ask: Ask) -> web.Response:
    return web.Response(body=await make_video(ask.text()), content_type="video/mp4")


async def _video_to_video(ask: Ask) -> web.Response:
    """``video-to-video``: base64 video in ``inputs``, ``parameters.prompt``; a new clip coloured
    by the prompt, as long as the input's first labels say (derived from both)."""
    try:
        video = base64.b64decode(str(ask.inputs or ""), validate=True)
        labels = await motion_labels(video)
    except ValueError as e:
        raise Fault(400, {"error": f"[sandbox] video-to-video expects a base64 video ({e})"}) from None
    return web.Response(body=await make_video(f"{_prompt(ask) or ''} {labels[0]['label']}"), content_type="video/mp4")


async def _video_classification(ask: Ask) -> web.Response:
    try:
        return as_json(await motion_labels(ask.body))
    except ValueError as e:
        raise Fault(400, {"error": f"[sandbox] {e}"}) from None


async def _speech_recognition(ask: Ask) -> web.Response:
    audio = ask.audio()
    said = wav_comment(audio)
    if said:
        return as_json({"text": f"[sandbox] {said}"})
    samples = await decode_audio(audio)
    return as_json({"text": f"[sandbox transcript of {len(samples) / SAMPLE_RATE:.1f} s of audio]"})


async def _audio_classification(ask: Ask) -> web.Response:
    samples = await decode_audio(ask.audio())
    rms = float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0
    loud = min(0.99, rms * 5)
    return as_json(sorted(
        [{"label": "loud sound", "score": round(loud, 4)}, {"label": "quiet sound", "score": round(1 - loud, 4)}],
        key=lambda x: -x["score"],
    ))


async def _audio_to_audio(ask: Ask) -> web.Response:
    samples = await decode_audio(ask.audio())
    peak = float(np.abs(samples).max()) if samples.size else 0.0
    norm = samples * (0.9 / peak) if peak > 0 else samples
    wav = await pcm_to_wav(norm)
    return as_json([{"label": "[sandbox] normalised", "content-type": "audio/wav", "blob": base64.b64encode(wav).decode()}])


def _generated_text(t: str) -> list[dict[str, str]]:
    return [{"generated_text": f"[sandbox] generated text for: {t}"}]


SERVED: dict[str, Handler] = {
    "conversational": _conversational,
    "text-classification": _json_of(lambda t: [sentiment(t)]),
    "token-classification": _json_of(entities),
    "fill-mask": _fill_mask,
    "summarization": _summarization,
    "translation": _translation,
    "text-generation": _json_of(_generated_text),
    "text2text-generation": _json_of(_generated_text),
    "question-answering": _question_answering,
    "sentence-similarity": _sentence_similarity,
    "tabular-classification": _tabular_classification,
    "object-detection": _image_json(boxes),
    "image-classification": _image_json(_classes),
    "image-to-text": _image_json(_caption),
    "image-segmentation": _image_json(segments),
    "depth-estimation": _image_json(_depth),
    "visual-question-answering": _visual_question,
    "document-question-answering": _visual_question,
    "image-to-image": _image_to_image,
    "text-to-image:b64": _text_to_image_b64,
    "text-to-image": _text_to_image,
    "text-to-speech": _text_to_speech,
    "image-to-video": _image_to_video,
    "image-text-to-video": _image_to_video,
    "image-text-to-image": _image_to_image,
    "video-to-video": _video_to_video,
    "text-to-video": _text_to_video,
    "video-classification": _video_classification,
    "automatic-speech-recognition": _speech_recognition,
    "audio-classification": _audio_classification,
    "audio-to-audio": _audio_to_audio,
}
"""Task → handler; ControlNet tasks (``<condition>-control``, ``<condition>-text-to-image``) are
matched by suffix in :func:`respond`."""
