"""A Hugging Face inference stand-in: ``POST /models/{model_id}`` on 127.0.0.1, every task.

It speaks the wire formats ``huggingface_hub.AsyncInferenceClient`` uses when a model is a URL
(the ``hf-inference`` provider helpers of huggingface_hub 2.4): JSON ``{"inputs", "parameters"}``
or raw image/audio bytes in; JSON lists/dicts or raw image/audio/video bytes out. It is not a
model: every output is *derived from the inputs* (image size and colours, text length, audio
duration) so a chain of tasks can be followed and tests can check results. Text outputs start
with ``[sandbox]``.

Test knobs: ``latency`` (seconds per model id or task), ``faults`` (status codes or
``"timeout"`` consumed one per request), ``gone`` (always 404). Every request is recorded in
``records`` with ``time.monotonic()`` timestamps.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import providers
from .answers import Ask, respond
from .faults import Fault
from .text_outputs import MASK_TOKENS

log = logging.getLogger(__name__)

# Guesses from the model id when ``task_of`` does not know the model (checked in order).
_MODEL_HINTS: tuple[tuple[str, str], ...] = (
    ("controlnet", "canny-text-to-image"),
    ("depth", "depth-estimation"),
    ("dpt", "depth-estimation"),
    ("detr", "object-detection"),
    ("yolo", "object-detection"),
    ("segformer", "image-segmentation"),
    ("maskformer", "image-segmentation"),
    ("caption", "image-to-text"),
    ("blip", "image-to-text"),
    ("vqa", "visual-question-answering"),
    ("layoutlm", "document-question-answering"),
    ("donut", "document-question-answering"),
    ("whisper", "automatic-speech-recognition"),
    ("wav2vec", "automatic-speech-recognition"),
    ("speecht5_tts", "text-to-speech"),
    ("tts", "text-to-speech"),
    ("espnet", "text-to-speech"),
    ("enhance", "audio-to-audio"),
    ("sepformer", "audio-to-audio"),
    ("kontext", "image-text-to-image"),
    ("image-edit", "image-text-to-image"),
    ("pix2pix", "image-text-to-image"),
    ("vace", "video-to-video"),
    ("ltx-video", "image-text-to-video"),
    ("i2v", "image-to-video"),
    ("image-to-video", "image-to-video"),
    ("videomae", "video-classification"),
    ("timesformer", "video-classification"),
    ("video", "text-to-video"),
    ("stable-diffusion", "text-to-image"),
    ("diffusion", "text-to-image"),
    ("opus-mt", "translation"),
    ("translat", "translation"),
    ("t5", "translation"),
    ("bart-large-cnn", "summarization"),
    ("summar", "summarization"),
    ("pegasus", "summarization"),
    ("squad", "question-answering"),
    ("ner", "token-classification"),
    ("bert-base", "fill-mask"),
    ("roberta-base", "fill-mask"),
    ("sentiment", "text-classification"),
    ("sst", "text-classification"),
    ("finbert", "text-classification"),
    ("sentence-transformers", "sentence-similarity"),
    ("minilm", "sentence-similarity"),
    ("vit", "image-classification"),
    ("resnet", "image-classification"),
    ("ast-", "audio-classification"),
    ("emotion", "audio-classification"),
)


@dataclass
class Record:
    """One request the stand-in served.

    Attributes:
        model: model id from the URL.
        task: the task it was served as.
        start, end: ``time.monotonic()`` seconds at arrival and at the response (or abort).
        status: HTTP status returned; 499 when the client went away first.
        answer: the body sent back (``b""`` for errors and streamed answers), so tests can compare
            what the product made of an answer with the answer itself.
    """

    model: str
    task: str
    start: float
    end: float
    status: int
    answer: bytes = b""
    provider: str | None = None
    bill_to: str = ""
    asked: str = ""  # the request's text input (``inputs`` or ``prompt``), if any


# ----------------------------------------------------------------------------------------------
# The server


class InferenceStandIn:
    """Hugging Face inference stand-in on ``127.0.0.1`` (port chosen by the OS).

    Args:
        task_of: model id -> task (pipeline tag or ControlNet task). Unknown models are guessed
            from the payload and the model id.
        latency: model id or task -> seconds to wait before answering.
        faults: model id -> list of status codes or ``"timeout"``, consumed one per request.
        gone: model ids that always answer 404.
        estimated_time: seconds reported in 503 bodies.
        hang_seconds: how long a ``"timeout"`` fault stalls.

    Use ``url = await standin.start()`` / ``await standin.close()``, or ``async with``.
    """

    def __init__(
        self,
        task_of: dict[str, str] | None = None,
        *,
        latency: dict[str, float] | None = None,
        faults: dict[str, list[int | str]] | None = None,
        gone: set[str] | None = None,
        estimated_time: float = 0.1,
        hang_seconds: float = 30.0,
    ) -> None:
        self.task_of: dict[str, str] = dict(task_of or {})
        self.latency: dict[str, float] = dict(latency or {})
        self.faults: dict[str, list[int | str]] = {k: list(v) for k, v in (faults or {}).items()}
        self.gone: set[str] = set(gone or ())
        self.estimated_time = estimated_time
        self.hang_seconds = hang_seconds
        self.records: list[Record] = []
        self.no_credits: set[str] = set()  # accounts ("" = the token's owner) answered 402
        self.fal = providers.FalQueue(self._note)
        self.url: str | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Start serving; returns the base URL ``http://127.0.0.1:PORT``."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/models/{model_id:.+}", self._handle)
        self.fal.add_routes(app)
        app.router.add_post("/v1/chat/completions", self._handle)  # the router's auto route
        app.router.add_post("/{provider}/v1/chat/completions", self._handle)
        app.router.add_post("/{provider}/models/{model_id:.+}", self._handle)
        app.router.add_post("/{provider}/v1/images/generations", self._handle)  # together's text-to-image
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def _note(self, model: str, task: str, status: int, provider: str, bill_to: str, asked: str) -> None:
        now = time.monotonic()
        self.records.append(Record(model, task, now, now, status, b"", provider, bill_to, asked))

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "InferenceStandIn":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- dispatch -------------------------------------------------------------------------------

    def _guess(self, model: str, ctype: str, body: bytes, payload: Any, accept: str) -> str:
        if model in self.task_of:
            return self.task_of[model]
        low = model.lower()
        if isinstance(payload, dict):
            inputs = payload.get("inputs")
            if "messages" in payload:
                return "conversational"
            if "table" in payload:
                return "tabular-classification"
            if "question" in payload and "image" in payload:
                return "visual-question-answering"
            if isinstance(inputs, dict):
                if "source_sentence" in inputs:
                    return "sentence-similarity"
                if "image" in inputs:
                    return "document-question-answering"
                if "context" in inputs:
                    return "question-answering"
            if "image/" in accept:
                if isinstance(inputs, str) and len(inputs) > 100 and re.fullmatch(r"[A-Za-z0-9+/=\s]+", inputs[:200]):
                    return "image-to-image"
                return "text-to-image"
            if isinstance(inputs, str) and any(tok in inputs for tok in MASK_TOKENS):
                return "fill-mask"
        for hint, task in _MODEL_HINTS:
            if hint in low:
                return task
        if payload is None and body:
            from pipeline.media import sniff

            s = sniff(body)
            if s and s.kind == "image":
                return "image-to-image" if "image/" in accept else "image-to-text"
            if s and s.kind in ("audio", "video"):
                return "automatic-speech-recognition"
        return "text-generation"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        model = request.match_info.get("model_id", "")
        provider = request.match_info.get("provider", "hf-inference" if model else "auto")
        chat = request.path.endswith("/chat/completions")
        images = request.path.endswith("/v1/images/generations")
        for suffix in ("/v1/chat/completions", "/chat/completions"):
            if model.endswith(suffix):
                model = model[: -len(suffix)]
        body = await request.read()
        ctype = request.headers.get("Content-Type", "")
        payload: Any = None
        if "json" in ctype or (body[:1] in (b"{", b"[") and not ctype.startswith(("image/", "audio/", "video/"))):
            try:
                payload = json.loads(body or b"null")
            except ValueError:
                payload = None
        if not model and isinstance(payload, dict):  # router and OpenAI-style routes: the model is in the body
            model, suffix = providers.split_router_model(str(payload.get("model", "")))
            provider = request.match_info.get("provider") or (f"auto:{suffix}" if suffix else "auto")
        task = "conversational" if chat else "text-to-image:b64" if images else self._guess(model, ctype, body, payload, request.headers.get("Accept", ""))
        status = 499
        answer = b""
        bill_to = request.headers.get(providers.BILL_HEADER, "")
        try:
            providers.check_credits(request.headers, self.no_credits)
            if model in self.gone:
                raise Fault(404, {"error": f"Model {model} does not exist"})
            queue = self.faults.get(f"{provider}:{model}") or self.faults.get(model)
            if queue:
                fault = queue.pop(0)
                if fault == "timeout":
                    await asyncio.sleep(self.hang_seconds)
                    raise Fault(504, {"error": "stand-in stalled"})
                code = int(fault)
                err: dict[str, Any] = {"error": f"[sandbox] fault {code} for {model}"}
                if code == 503:
                    err = {"error": f"Model {model} is currently loading", "estimated_time": self.estimated_time}
                elif code == 429:
                    err = {"error": "Rate limit reached. Please slow down."}
                raise Fault(code, err)
            delay = self.latency.get(model, self.latency.get(task, 0.0))
            if delay:
                await asyncio.sleep(delay)
            response = await respond(Ask(task, model, body, payload))
            if not chat and response.status < 300 and not response.prepared:
                # billed compute, as Hugging Face inference servers report it (seconds)
                response.headers["x-compute-time"] = f"{time.monotonic() - start:.9f}"
            status = response.status
            answer = response.body if isinstance(response.body, bytes) else b""
            return response
        except Fault as f:
            status = f.status
            return web.json_response(f.body, status=f.status)
        finally:
            asked = payload.get("inputs") or payload.get("prompt") if isinstance(payload, dict) else ""
            self.records.append(Record(model, task, start, time.monotonic(), status, answer, provider, bill_to,
                                       asked if isinstance(asked, str) else ""))
