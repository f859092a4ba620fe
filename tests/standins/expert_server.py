"""A stand-in for the team's expert server (``hugginggpt experts serve``) on 127.0.0.1, speaking the
contract the bot's hybrid routing relies on:

* ``GET /models`` → ``{"models": [{"id", "task", "state", "reason", "size_bytes", "library"}],
  "device", "memory_budget_bytes"}``;
* ``POST /models/{model_id}`` (the id may hold a ``/``) in the Hugging Face inference wire format
  as ``huggingface_hub.AsyncInferenceClient`` sends it for a URL: raw image bytes, or JSON
  ``{"inputs": <base64>, "parameters": {...}}`` when there are parameters. Answers, derived from
  the real pixels sent: image-classification and object-detection JSON (labels start with
  ``[expert]``), depth-estimation and ControlNet annotators (``<cond>-control``, addressed by the
  task name) as raw ``image/png``;
* errors in Hugging Face's shape ``{"error": "<sentence>"}``: 404 for a model it does not serve.

It runs its own event loop in a thread, so a test can run ``hugginggpt`` as a subprocess against
it. Every request is recorded in :attr:`ExpertServerStandIn.requests`.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web
from PIL import Image, ImageFilter
from sandbox import serve_loopback


@dataclass
class Recorded:
    """One request the stand-in received."""

    method: str
    path: str
    authorization: str | None
    content_type: str
    size: int


def model(id: str, task: str, state: str = "loaded", reason: str | None = None, library: str = "transformers") -> dict:
    """One ``GET /models`` entry in the contract's shape."""
    return {"id": id, "task": task, "state": state, "reason": reason, "size_bytes": 1_234_567, "library": library}


class ExpertServerStandIn:
    """The stand-in server.

    Args:
        models: the ``GET /models`` entries (:func:`model`).

    Attributes:
        requests: every request received, in order.
        failures: model id → HTTP status answered to its ``POST`` instead of an output.
        parameters: the ``parameters`` of every JSON request, in order.
    """

    def __init__(self, models: list[dict]) -> None:
        self.models = list(models)
        self.requests: list[Recorded] = []
        self.failures: dict[str, int] = {}
        self.parameters: list[dict] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "ExpertServerStandIn":
        """Start on a free loopback port (its own thread and event loop); sets :attr:`url`."""
        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_get("/models", self._list)
            app.router.add_post("/models/{model_id:.+}", self._infer)
            self._runner, port = loop.run_until_complete(serve_loopback(app))
            self.url = f"http://127.0.0.1:{port}"
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="expert-server-standin", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def close(self) -> None:
        """Stop the server (its port refuses connections afterwards)."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = self._thread = None

    def __enter__(self) -> "ExpertServerStandIn":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what tests read ---------------------------------------------------------------------

    @property
    def listing_calls(self) -> int:
        """How many ``GET /models`` it answered."""
        return sum(1 for r in self.requests if r.method == "GET" and r.path == "/models")

    def posted(self) -> list[str]:
        """Model ids it was asked to run, in order."""
        return [r.path.removeprefix("/models/") for r in self.requests if r.method == "POST"]

    # -- handlers ----------------------------------------------------------------------------

    def _record(self, request: web.Request, size: int) -> None:
        self.requests.append(Recorded(request.method, request.path, request.headers.get("Authorization"),
                                      request.headers.get("Content-Type", ""), size))

    async def _list(self, request: web.Request) -> web.Response:
        self._record(request, 0)
        return web.json_response({"models": self.models, "device": "cpu", "memory_budget_bytes": 4_000_000_000})

    async def _infer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self._record(request, len(body))
        model_id = request.match_info["model_id"]
        entry = next((m for m in self.models if m["id"] == model_id and m["state"] in ("loaded", "on_disk")), None)
        if entry is None:
            return web.json_response({"error": f"The model {model_id} is not served here."}, status=404)
        if model_id in self.failures:
            status = self.failures[model_id]
            return web.json_response({"error": f"The model {model_id} failed (stand-in status {status})."},
                                      status=status)
        try:
            image, parameters = _image_of(body, request.content_type)
        except ValueError as e:
            return web.json_response({"error": str(e)}, status=400)
        self.parameters.append(parameters)
        if entry["task"].endswith("-text-to-image") and not parameters.get("prompt"):
            return web.json_response({"error": "The field parameters.prompt is required."}, status=400)
        return await asyncio.to_thread(_answer, entry["task"], image)


def _image_of(body: bytes, content_type: str) -> tuple[Image.Image, dict]:
    """The image a client sent (raw bytes, or base64 in ``{"inputs": ...}``) and its parameters."""
    data, parameters = body, {}
    if content_type == "application/json":
        try:
            payload = json.loads(body)
            data, parameters = base64.b64decode(payload["inputs"]), payload.get("parameters") or {}
        except (ValueError, KeyError, TypeError):
            raise ValueError("The field inputs must hold a base64 image.") from None
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except Exception:  # noqa: BLE001 - any undecodable body is a bad payload
        raise ValueError("The field inputs is not an image.") from None
    return image.convert("RGB"), parameters


def _png(image: Image.Image) -> web.Response:
    out = io.BytesIO()
    image.save(out, "PNG")
    return web.Response(body=out.getvalue(), content_type="image/png")


def _answer(task: str, image: Image.Image) -> web.Response:
    pixels = np.asarray(image, dtype="float32")
    w, h = image.size
    if task == "image-classification":
        means = pixels.reshape(-1, 3).mean(axis=0)
        names = ["[expert] reddish", "[expert] greenish", "[expert] bluish"]
        shares = means / max(float(means.sum()), 1.0)
        ranked = sorted(zip(names, shares.tolist()), key=lambda t: -t[1])
        return web.json_response([{"label": n, "score": round(s, 4)} for n, s in ranked])
    if task == "object-detection":
        box = {"xmin": w // 4, "ymin": h // 4, "xmax": 3 * w // 4, "ymax": 3 * h // 4}
        return web.json_response([{"label": "[expert] object", "score": 0.9, "box": box}])
    if task == "depth-estimation":
        grey = np.asarray(image.convert("L"), dtype="float32")
        depth = 255 - grey  # brighter is nearer: a depth map derived from the real pixels
        return _png(Image.fromarray(depth.astype("uint8"), "L"))
    if task.endswith("-control"):
        return _png(image.convert("L").filter(ImageFilter.FIND_EDGES))
    if task.endswith("-text-to-image"):  # a "drawing" that follows the condition: its lines in blue
        lines = np.asarray(image.convert("L"), dtype="uint8")
        drawn = np.stack([np.zeros_like(lines), np.zeros_like(lines), lines], axis=-1)
        return _png(Image.fromarray(drawn, "RGB"))
    return web.json_response({"error": f"The stand-in has no output for {task}."}, status=400)
