"""Task execution's experts: one async call per task, output normalised (HuggingGPT §3.3).

:class:`Experts` runs one task on one Hugging Face model through ``huggingface_hub``'s
``AsyncInferenceClient`` and turns whatever the task returns into a :class:`pipeline.types.Output`:
text for people, JSON-able ``data`` for the response stage, and real files (annotated images,
speech, video) saved through the conversation's :class:`pipeline.types.ResourceSink`.

Routing of model ``M`` (ARCHITECTURE.md, "Backends"):

1. ``endpoints[M]`` (a dedicated Inference Endpoint URL): the client POSTs straight to it;
2. ``base_url``: ``{base_url}/models/{M}`` in the Hugging Face inference wire format;
3. otherwise the model id with the configured Inference Provider (``hf-inference``, ``auto``...).

``canny-control`` never calls a model: the edge map is computed here with OpenCV (model
``local:canny``), as the reference implementation's annotator does.

Files come only from :class:`Resource` objects of the conversation's store; a text argument is
never interpreted as a path or URL (LLM output is untrusted).
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx2
from huggingface_hub import AsyncInferenceClient
from huggingface_hub.errors import HfHubHTTPError, InferenceTimeoutError
from huggingface_hub.utils import build_hf_headers, get_async_session, hf_raise_for_status
from PIL import Image
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

from . import render
from .errors import ExpertError
from .media import sniff
from .tasks import CONTROLNET_CONDITIONS, TASKS
from .types import Modality, Output, Resource, ResourceSink

log = logging.getLogger(__name__)

LOCAL_CANNY = "local:canny"


@dataclass
class ExpertSettings:
    """What the experts need from ``[inference]`` (built by the service from ``InferenceSettings``).

    Attributes:
        provider: Inference Providers name (``"hf-inference"``, ``"auto"``, ``"fal-ai"`` ...) or
            ``None`` (the client's default, ``auto``).
        token: Hugging Face token, or ``None``.
        base_url: gateway; model ``M`` is called at ``{base_url}/models/{M}``.
        endpoints: model id -> dedicated endpoint URL (wins over ``base_url``).
        task_timeout: seconds per HTTP call.
        max_attempts: tries per model for retryable failures (429, 503, 5xx, timeout).
        backoff_max: seconds, cap of one wait between tries.
    """

    provider: str | None = "hf-inference"
    token: str | None = None
    base_url: str | None = None
    endpoints: dict[str, str] = field(default_factory=dict)
    task_timeout: float = 120.0
    max_attempts: int = 3
    backoff_max: float = 30.0

    @classmethod
    def from_inference(cls, inference: Any) -> "ExpertSettings":
        """Build from an object shaped like ``bot.settings.InferenceSettings`` (token may be a SecretStr)."""
        token = inference.token
        if token is not None and hasattr(token, "get_secret_value"):
            token = token.get_secret_value()
        return cls(
            provider=inference.provider,
            token=token,
            base_url=inference.base_url,
            endpoints=dict(inference.endpoints or {}),
            task_timeout=float(inference.task_timeout),
            max_attempts=int(inference.max_attempts),
            backoff_max=float(inference.backoff_max),
        )


def _summary(items: list[tuple[str, float | None]], limit: int = 5) -> str:
    """``"cat (0.92), dog (0.05)"`` from ``(label, score)`` pairs."""
    parts = [f"{label} ({score:.2f})" if score is not None else str(label) for label, score in items[:limit]]
    if len(items) > limit:
        parts.append(f"and {len(items) - limit} more")
    return ", ".join(parts)


def _flatten(result: Any) -> list[Any]:
    """Classification answers come as a list, a list of lists, or a single element."""
    if isinstance(result, list):
        if result and isinstance(result[0], list):
            return list(result[0])
        return list(result)
    return [result]


def _ext_name(task: str, task_id: int, mime: str) -> str:
    from .media import extension_for

    return f"{task}-{task_id}{extension_for(mime)}"


class Experts:
    """Runs one task on one model and normalises its output.

    Args:
        settings: :class:`ExpertSettings`.

    One ``AsyncInferenceClient`` (token, ``timeout=task_timeout``) is shared by all calls; close it
    with :meth:`aclose`.

    Example::

        experts = Experts(ExpertSettings(base_url="http://127.0.0.1:8080"))
        out = await experts.run("image-to-text", "Salesforce/blip-image-captioning-large",
                                {"image": photo_resource}, sink, task_id=1)
        print(out.text)          # the caption
        await experts.aclose()
    """

    def __init__(self, settings: ExpertSettings) -> None:
        self.settings = settings
        self._client = AsyncInferenceClient(
            provider=settings.provider or None, token=settings.token or None, timeout=settings.task_timeout
        )
        self._http: httpx2.AsyncClient | None = None

    # -- routing --------------------------------------------------------------------------------

    def endpoint_for(self, model: str) -> str | None:
        """URL that serves ``model``, or ``None`` when the provider path is used.

        ``endpoints[model]`` first, then ``{base_url}/models/{model}`` (ARCHITECTURE.md).
        """
        if model in self.settings.endpoints:
            return self.settings.endpoints[model]
        if self.settings.base_url:
            return f"{self.settings.base_url.rstrip('/')}/models/{model}"
        return None

    async def aclose(self) -> None:
        """Close the HTTP clients."""
        await self._client.close()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- public entry ---------------------------------------------------------------------------

    async def run(
        self, task: str, model: str, args: dict[str, str | Resource], sink: ResourceSink, *, task_id: int
    ) -> Output:
        """Run ``task`` on ``model`` and return its normalised :class:`Output`.

        Args:
            task: canonical task name (``pipeline.tasks.TASKS``).
            model: Hugging Face model id (``local:canny`` for the local edge map).
            args: argument key -> text (``str``) or a :class:`Resource` for media arguments; media
                are read from ``resource.path`` only.
            sink: where generated files are saved (origin ``"task:<task_id>"``).
            task_id: the task's id in the plan.

        Returns:
            :class:`Output` with ``text``, ``data`` and ``files``.

        Raises:
            ExpertError: ``reason`` one of gone, refused, rate_limited, loading, server, timeout,
                bad_output, unavailable. Retryable failures are retried here first, up to
                ``max_attempts`` tries with exponential backoff and jitter capped by
                ``backoff_max`` (a 503 waits ``min(estimated_time, backoff_max)``).
        """
        spec = TASKS.get(task)
        if spec is None:
            raise ExpertError(f"The task {task} is not known.", reason="unavailable")
        inputs = await self._read_args(task, spec.allowed, spec.required, args)

        if spec.local or model.startswith("local:"):
            if task != "canny-control":
                raise ExpertError(f"No local implementation serves {task}.", reason="unavailable")
            png = await asyncio.to_thread(render.canny_edges, inputs["image"])
            w, h = await asyncio.to_thread(render.image_size, png)
            res = await sink.add(
                png, kind="image", mime="image/png", origin=f"task:{task_id}",
                description=f"canny edge map, {w}x{h} pixels", name=_ext_name(task, task_id, "image/png"),
            )
            return Output(text=None, files=[res], data={"width": w, "height": h})
        if model.startswith("controller:"):
            raise ExpertError(f"The model {model} is not an expert model.", reason="unavailable")

        target = self.endpoint_for(model) or model
        settings = self.settings
        expo = wait_random_exponential(multiplier=0.5, max=settings.backoff_max)

        def wait(rs: RetryCallState) -> float:
            exc = rs.outcome.exception() if rs.outcome else None
            if isinstance(exc, ExpertError) and exc.estimated_time is not None:
                return max(0.0, min(exc.estimated_time, settings.backoff_max))
            return expo(rs)

        def before_sleep(rs: RetryCallState) -> None:
            exc = rs.outcome.exception() if rs.outcome else None
            log.warning(
                "task %s (%s) on %s: attempt %d failed (%s), retrying in %.2f s",
                task_id, task, model, rs.attempt_number, getattr(exc, "reason", exc),
                rs.next_action.sleep if rs.next_action else 0.0,
            )

        raw: Any = None
        began = time.monotonic()
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(lambda e: isinstance(e, ExpertError) and e.retryable),
            stop=stop_after_attempt(max(1, settings.max_attempts)),
            wait=wait,
            before_sleep=before_sleep,
            reraise=True,
        ):
            with attempt:
                try:
                    raw = await self._call(task, target, inputs)
                except ExpertError:
                    raise
                except Exception as exc:  # noqa: BLE001 - mapped to one sentence below
                    raise self._map_error(exc, task, model) from exc
        log.info("task %s (%s) on %s answered in %.2f s", task_id, task, model, time.monotonic() - began)
        try:
            return await self._normalise(task, raw, inputs, sink, task_id)
        except ExpertError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.error("task %s (%s) on %s: unusable output: %r", task_id, task, model, exc)
            raise ExpertError(
                f"The model {model} returned output that could not be read.", repr(exc), reason="bad_output"
            ) from exc

    # -- arguments ------------------------------------------------------------------------------

    async def _read_args(
        self, task: str, allowed: dict[str, Modality], required: dict[str, Modality], args: dict[str, str | Resource]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, kind in allowed.items():
            value = args.get(key)
            if value is None:
                if key in required:
                    raise ExpertError(f"The task {task} needs a {kind} argument '{key}'.", reason="refused")
                continue
            if kind == "text":
                if isinstance(value, Resource):
                    if value.kind != "text":
                        raise ExpertError(f"The task {task} needs text for '{key}', not {value.id}.", reason="refused")
                    out[key] = (await asyncio.to_thread(value.path.read_bytes)).decode("utf-8", errors="replace")
                else:
                    out[key] = str(value)
            else:
                if not isinstance(value, Resource):
                    raise ExpertError(
                        f"The task {task} needs {kind} '{key}' from this conversation, not the text {str(value)[:40]!r}.",
                        reason="refused",
                    )
                if value.kind != kind:
                    raise ExpertError(
                        f"The task {task} needs {kind} for '{key}', but {value.id} is {value.kind}.", reason="refused"
                    )
                out[key] = await asyncio.to_thread(value.path.read_bytes)
                out[f"{key}__resource"] = value
        return out

    # -- the calls ------------------------------------------------------------------------------

    async def _post_raw(self, task: str, target: str, *, json_body: Any = None, data: bytes | None = None) -> tuple[bytes, str]:
        """POST to a URL in the inference wire format for tasks the client has no method/provider for."""
        if not target.startswith(("http://", "https://")):
            raise ExpertError(
                f"No Inference Provider serves {task}; configure an endpoint for it.", reason="unavailable"
            )
        if self._http is None:
            self._http = get_async_session()
        headers = build_hf_headers(token=self.settings.token or None)
        if data is not None:
            headers["content-type"] = "application/octet-stream"
        try:
            response = await self._http.post(
                target, json=json_body, content=data, headers=headers, timeout=self.settings.task_timeout
            )
        except httpx2.TimeoutException as exc:
            raise InferenceTimeoutError(f"Inference call timed out: {target}") from exc
        hf_raise_for_status(response)
        return response.content, response.headers.get("content-type", "")

    async def _call(self, task: str, target: str, a: dict[str, Any]) -> Any:
        c = self._client
        m = target
        if task == "text-classification":
            return await c.text_classification(a["text"], model=m)
        if task == "token-classification":
            return await c.token_classification(a["text"], model=m)
        if task == "summarization":
            return await c.summarization(a["text"], model=m)
        if task == "translation":
            return await c.translation(a["text"], model=m)
        if task in ("text-generation", "text2text-generation"):
            return await c.text_generation(a["text"], model=m, max_new_tokens=256)
        if task == "conversational":
            return await c.chat_completion(messages=[{"role": "user", "content": a["text"]}], model=m, max_tokens=512)
        if task == "question-answering":
            return await c.question_answering(question=a["text"], context=a["context"], model=m)
        if task == "sentence-similarity":
            others = [line.strip() for line in a["context"].splitlines() if line.strip()]
            if not others:
                raise ExpertError("Sentence similarity needs other sentences, one per line.", reason="refused")
            a["__sentences"] = others
            return await c.sentence_similarity(a["text"], other_sentences=others, model=m)
        if task == "tabular-classification":
            table = _csv_table(a["text"])
            a["__rows"] = len(next(iter(table.values())))
            return await c.tabular_classification(table, model=m)
        if task == "object-detection":
            return await c.object_detection(a["image"], model=m)
        if task == "image-classification":
            return await c.image_classification(a["image"], model=m)
        if task == "image-to-text":
            return await c.image_to_text(a["image"], model=m)
        if task == "text-to-image":
            return await c.text_to_image(a["text"], model=m)
        if task == "image-to-image":
            return await c.image_to_image(a["image"], prompt=a.get("text") or None, model=m)
        if task == "image-segmentation":
            return await c.image_segmentation(a["image"], model=m)
        if task == "depth-estimation":
            return await self._post_raw(task, m, data=a["image"])
        if task == "visual-question-answering":
            return await c.visual_question_answering(a["image"], a["text"], model=m)
        if task == "document-question-answering":
            return await c.document_question_answering(a["image"], a["text"], model=m)
        if task == "text-to-speech":
            return await c.text_to_speech(a["text"], model=m)
        if task == "automatic-speech-recognition":
            return await c.automatic_speech_recognition(a["audio"], model=m)
        if task == "audio-to-audio":
            return await c.audio_to_audio(a["audio"], model=m)
        if task == "audio-classification":
            return await c.audio_classification(a["audio"], model=m)
        if task == "text-to-video":
            if m.startswith(("http://", "https://")):
                return await self._post_raw(task, m, json_body={"inputs": a["text"]})
            return await c.text_to_video(a["text"], model=m)
        cond, _, rest = task.partition("-")
        if cond in CONTROLNET_CONDITIONS and rest == "control":
            return await c.image_to_image(a["image"], model=m)
        if cond in CONTROLNET_CONDITIONS and rest == "text-to-image":
            return await c.image_to_image(a["image"], prompt=a["text"], model=m)
        raise ExpertError(f"No expert call is implemented for {task}.", reason="unavailable")

    # -- errors ---------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        token = self.settings.token
        return text.replace(token, "***") if token else text

    def _map_error(self, exc: BaseException, task: str, model: str) -> ExpertError:
        """One sentence for the user (never the token), details for the log. Source of the status
        meanings: the Hugging Face inference API's documented HTTP errors."""
        detail = self._scrub(f"{type(exc).__name__}: {exc}")
        chain: list[BaseException] = []
        e: BaseException | None = exc
        while e is not None and e not in chain:
            chain.append(e)
            e = e.__cause__ or e.__context__
        err: ExpertError
        if any(isinstance(x, (InferenceTimeoutError, httpx2.TimeoutException, asyncio.TimeoutError)) for x in chain):
            err = ExpertError(
                f"The model {model} did not answer within {self.settings.task_timeout:g} seconds.",
                detail, reason="timeout", retryable=True,
            )
        elif http := next((x for x in chain if isinstance(x, HfHubHTTPError) and x.response is not None), None):
            status = http.response.status_code
            if status in (404, 410):
                err = ExpertError(f"The model {model} is not available (HTTP {status}).", detail, reason="gone")
            elif status == 429:
                err = ExpertError(
                    f"The model {model} is rate-limited right now (HTTP 429).", detail, reason="rate_limited", retryable=True
                )
            elif status == 503:
                est = None
                try:
                    body = http.response.json()
                    if isinstance(body, dict) and body.get("estimated_time") is not None:
                        est = float(body["estimated_time"])
                except Exception:  # noqa: BLE001 - body is optional
                    est = None
                err = ExpertError(
                    f"The model {model} is still loading (HTTP 503).", detail, reason="loading", retryable=True,
                    estimated_time=est,
                )
            elif status >= 500:
                err = ExpertError(
                    f"The model {model} failed on the server (HTTP {status}).", detail, reason="server", retryable=True
                )
            else:
                err = ExpertError(f"The model {model} refused the request (HTTP {status}).", detail, reason="refused")
        elif any(isinstance(x, httpx2.TransportError) for x in chain):
            err = ExpertError(f"The model {model} could not be reached.", detail, reason="server", retryable=True)
        elif isinstance(exc, ValueError) and ("not supported" in str(exc) or "provider" in str(exc).lower()):
            err = ExpertError(f"No configured provider serves {task} with {model}.", detail, reason="unavailable")
        else:
            err = ExpertError(f"The model {model} returned output that could not be read.", detail, reason="bad_output")
        log.warning("expert %s (%s) failed: %s [%s]", model, task, detail[:500], err.reason)
        return err

    # -- normalisation --------------------------------------------------------------------------

    async def _save(
        self, sink: ResourceSink, data: bytes, kind: Modality, mime: str, task: str, task_id: int, description: str
    ) -> Resource:
        return await sink.add(
            data, kind=kind, mime=mime, origin=f"task:{task_id}", description=description,
            name=_ext_name(task, task_id, mime),
        )

    async def _save_image(self, sink: ResourceSink, image: Image.Image | bytes, task: str, task_id: int, what: str) -> Resource:
        png = image if isinstance(image, bytes) else await asyncio.to_thread(render.to_png, image)
        w, h = await asyncio.to_thread(render.image_size, png)
        return await self._save(sink, png, "image", "image/png", task, task_id, f"{what} ({w}x{h} pixels)")

    async def _normalise(self, task: str, raw: Any, a: dict[str, Any], sink: ResourceSink, task_id: int) -> Output:
        handler: Callable[..., Awaitable[Output]] | None = getattr(self, "_out_" + task.replace("-", "_"), None)
        if handler is not None:
            return await handler(raw, a, sink, task_id)
        cond, _, rest = task.partition("-")
        if cond in CONTROLNET_CONDITIONS and rest in ("control", "text-to-image"):
            what = f"{cond} condition image" if rest == "control" else f"image drawn from the {cond} condition: {a.get('text', '')[:60]}"
            res = await self._save_image(sink, raw, task, task_id, what)
            return Output(files=[res])
        raise ExpertError(f"No output reader exists for {task}.", reason="bad_output")

    @staticmethod
    def _labels(raw: Any) -> tuple[str, dict[str, Any]]:
        items = [(str(x.label), float(x.score) if x.score is not None else None) for x in _flatten(raw)]
        items.sort(key=lambda p: -(p[1] or 0))
        data = {"labels": [{"label": l, "score": s} for l, s in items]}
        return (_summary(items) if items else "no labels"), data

    async def _out_text_classification(self, raw, a, sink, task_id):
        text, data = self._labels(raw)
        return Output(text=text, data=data)

    async def _out_image_classification(self, raw, a, sink, task_id):
        text, data = self._labels(raw)
        return Output(text=text, data=data)

    async def _out_audio_classification(self, raw, a, sink, task_id):
        text, data = self._labels(raw)
        return Output(text=text, data=data)

    async def _out_token_classification(self, raw, a, sink, task_id):
        ents = []
        for x in _flatten(raw):
            group = getattr(x, "entity_group", None) or getattr(x, "entity", None) or ""
            ents.append(
                {"word": x.word, "entity": group, "score": float(x.score), "start": x.start, "end": x.end}
            )
        text = ", ".join(f"{e['word']} ({e['entity']})" for e in ents) or "no entities found"
        return Output(text=text, data={"entities": ents})

    async def _out_summarization(self, raw, a, sink, task_id):
        return Output(text=str(raw.summary_text))

    async def _out_translation(self, raw, a, sink, task_id):
        return Output(text=str(raw.translation_text))

    async def _out_text_generation(self, raw, a, sink, task_id):
        text = raw if isinstance(raw, str) else raw.generated_text
        return Output(text=str(text))

    _out_text2text_generation = _out_text_generation

    async def _out_conversational(self, raw, a, sink, task_id):
        content = raw.choices[0].message.content
        if content is None:
            raise ValueError("chat completion without content")
        return Output(text=str(content))

    async def _out_question_answering(self, raw, a, sink, task_id):
        x = raw[0] if isinstance(raw, list) else raw
        return Output(
            text=str(x.answer), data={"answer": x.answer, "score": x.score, "start": x.start, "end": x.end}
        )

    async def _out_sentence_similarity(self, raw, a, sink, task_id):
        sentences = a["__sentences"]
        scores = [float(s) for s in raw]
        if len(scores) != len(sentences):
            raise ValueError(f"{len(scores)} scores for {len(sentences)} sentences")
        pairs = sorted(zip(sentences, scores), key=lambda p: -p[1])
        text = "; ".join(f"{s:.2f} {sent[:60]!r}" for sent, s in pairs)
        return Output(text=text, data={"scores": [{"sentence": s, "score": v} for s, v in zip(sentences, scores)]})

    async def _out_tabular_classification(self, raw, a, sink, task_id):
        preds = [str(p) for p in raw]
        if len(preds) != a["__rows"]:
            raise ValueError(f"{len(preds)} predictions for {a['__rows']} rows")
        text = ", ".join(f"row {i + 1}: {p}" for i, p in enumerate(preds))
        return Output(text=text, data={"predictions": preds})

    async def _out_object_detection(self, raw, a, sink, task_id):
        objects = []
        for x in raw:
            b = x.box
            objects.append(
                {"label": str(x.label), "score": float(x.score), "box": [int(b.xmin), int(b.ymin), int(b.xmax), int(b.ymax)]}
            )
        objects.sort(key=lambda o: -o["score"])
        png = await asyncio.to_thread(render.draw_boxes, a["image"], objects)
        src = a["image__resource"]
        summary = _summary([(o["label"], o["score"]) for o in objects]) if objects else "no objects found"
        short = _summary([(o["label"], o["score"]) for o in objects], limit=3) if objects else "none"
        res = await self._save_image(sink, png, "object-detection", task_id, f"{src.id} with {len(objects)} boxes drawn: {short}")
        return Output(text=summary, files=[res], data={"objects": objects})

    async def _out_image_to_text(self, raw, a, sink, task_id):
        return Output(text=str(raw.generated_text).strip())

    async def _out_text_to_image(self, raw, a, sink, task_id):
        res = await self._save_image(sink, raw, "text-to-image", task_id, f"image of {a['text'][:60]!r}")
        return Output(files=[res])

    async def _out_image_to_image(self, raw, a, sink, task_id):
        prompt = a.get("text")
        what = f"{a['image__resource'].id} edited" + (f" as {prompt[:60]!r}" if prompt else "")
        res = await self._save_image(sink, raw, "image-to-image", task_id, what)
        return Output(files=[res])

    async def _out_image_segmentation(self, raw, a, sink, task_id):
        segments = [(str(x.label), None if x.score is None else float(x.score), x.mask) for x in raw]
        png = await asyncio.to_thread(render.overlay_masks, a["image"], segments)
        summary = _summary([(l, s) for l, s, _ in segments]) if segments else "no segments found"
        short = _summary([(l, s) for l, s, _ in segments], limit=3) if segments else "none"
        res = await self._save_image(sink, png, "image-segmentation", task_id, f"{a['image__resource'].id} with {len(segments)} masks: {short}")
        data = {"segments": [{"label": l, "score": s} for l, s, _ in segments]}
        return Output(text=summary, files=[res], data=data)

    async def _out_depth_estimation(self, raw, a, sink, task_id):
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
                import numpy as np

                img = await asyncio.to_thread(render.depth_to_png, np.squeeze(np.asarray(obj["predicted_depth"], dtype="float32")))
            else:
                raise ValueError("depth output without 'depth' or 'predicted_depth'")
        png = await asyncio.to_thread(lambda: render.to_png(render.open_rgb(img)))
        res = await self._save_image(sink, png, "depth-estimation", task_id, f"depth map of {a['image__resource'].id}")
        return Output(files=[res])

    async def _out_visual_question_answering(self, raw, a, sink, task_id):
        answers = [{"answer": str(x.answer), "score": None if x.score is None else float(x.score)} for x in _flatten(raw)]
        if not answers:
            raise ValueError("no answers")
        return Output(text=answers[0]["answer"], data={"answers": answers})

    _out_document_question_answering = _out_visual_question_answering

    async def _out_text_to_speech(self, raw, a, sink, task_id):
        s = sniff(raw)
        if s is None or s.kind != "audio":
            raise ValueError("text-to-speech output is not audio")
        res = await self._save(sink, raw, "audio", s.mime, "text-to-speech", task_id, f"speech of {a['text'][:60]!r}")
        return Output(files=[res])

    async def _out_automatic_speech_recognition(self, raw, a, sink, task_id):
        return Output(text=str(raw.text).strip())

    async def _out_audio_to_audio(self, raw, a, sink, task_id):
        files = []
        for x in raw:
            blob = x.blob if isinstance(x.blob, bytes) else base64.b64decode(x.blob)
            s = sniff(blob)
            if s is None or s.kind != "audio":
                raise ValueError("audio-to-audio output is not audio")
            files.append(
                await self._save(sink, blob, "audio", s.mime, "audio-to-audio", task_id, f"{x.label} from {a['audio__resource'].id}")
            )
        if not files:
            raise ValueError("no audio returned")
        return Output(text=", ".join(str(x.label) for x in raw), files=files, data={"labels": [str(x.label) for x in raw]})

    async def _out_text_to_video(self, raw, a, sink, task_id):
        body = raw[0] if isinstance(raw, tuple) else raw
        s = sniff(body)
        if s is None or s.kind != "video":
            raise ValueError("text-to-video output is not a video")
        res = await self._save(sink, body, "video", s.mime, "text-to-video", task_id, f"video of {a['text'][:60]!r}")
        return Output(files=[res])


def _csv_table(text: str) -> dict[str, list[str]]:
    """CSV text with a header row -> ``{column: [values...]}`` (the tabular tasks' ``table``)."""
    rows = [r for r in csv.reader(io.StringIO(text.strip())) if any(c.strip() for c in r)]
    if len(rows) < 2:
        raise ExpertError("Tabular classification needs CSV text with a header row and at least one data row.", reason="refused")
    header = [h.strip() for h in rows[0]]
    if any(len(r) != len(header) for r in rows[1:]):
        raise ExpertError("Every CSV row must have as many values as the header.", reason="refused")
    return {h: [r[i].strip() for r in rows[1:]] for i, h in enumerate(header)}
