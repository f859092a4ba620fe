"""The ASGI app: the Hugging Face inference wire format over the models of the local cache.

    GET  /models                  what can be served: loaded, on_disk, refused (and why), with tasks
                                  and the batches each model ran (runs, items, largest, retried);
                                  idle_seconds: since the last model request came or was
                                  answered (or the start)
    POST /models/{model_id}       run the model (the id may contain "/"); body and answer as
                                  huggingface_hub's client sends and parses them for a URL model
    GET  /healthz, GET /readyz    the process runs / the cache was scanned
    GET  /metrics                 the same figures for Prometheus (:mod:`expert_server.metrics`)

A request's deadline is its ``X-Request-Timeout`` header (seconds) or the config's
``default_deadline``, capped at ``max_deadline``; past it the answer is 504 and its place in the
queue is freed, as it is when the client disconnects. Errors are ``{"error": "<sentence>"}``:
400 bad payload (naming the field), 401 no or a wrong API key, 403 another site's web page, 404
unknown model, 413 an input over a limit (naming the field and the setting), 421 a host name not
answered (:mod:`expert_server.access`), 503 busy, out of memory or the memory budget held by the
inputs waiting, 504 deadline, 507 a model that never fits the memory budget. Each is one log line,
the caller's values escaped and cut (:func:`expert_server.errors.shown`); a client that leaves is
logged at INFO (it is not an error).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from . import tracing
from .access import AccessGuard
from .admission import Held, read_body
from .cache import CachedModel
from .config import ServerConfig
from .errors import BadPayload, ClientClosed, DeadlineExceeded, ExpertError, NotReady, Refused, UnknownModel, shown
from .metrics import exposition, registry_for
from .payload import Limits, parse_body
from .pool import Pool
from .queues import BatchStats, ModelQueue
from .tasks import Binary, body_limit, task_for

THREAD_PREFIX = "expert"
"""Name prefix of the threads that run inference (:func:`expert_server.server.serve` looks for them at exit)."""

log = logging.getLogger("expert_server")


@dataclass
class State:
    """Everything one server process holds (``app.state.experts``)."""

    config: ServerConfig
    device: str
    budget: int | None
    executor: ThreadPoolExecutor
    models: dict[str, CachedModel] = field(default_factory=dict)
    pool: Pool | None = None
    queues: dict[str, ModelQueue] = field(default_factory=dict)
    ready: bool = False
    last_request: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` when the last model request came or was answered (the start, before
    any): ``GET /models``
    says how long the server has been idle (``idle_seconds``), which ``hugginggpt experts
    launch`` reads to stop a rented server nobody uses."""

    @property
    def limits(self) -> Limits:
        """One request's input limits, from the config."""
        c = self.config
        return Limits(c.max_text_chars, c.max_image_pixels, c.max_audio_seconds, c.max_output_pixels,
                      c.max_video_frames)

    def queue(self, model_id: str) -> ModelQueue:
        """The queue of ``model_id`` (created on first use)."""
        q = self.queues.get(model_id)
        if q is None:
            model, cfg = self.models[model_id], self.config
            task = task_for(model.task)
            assert task is not None and self.pool is not None
            q = ModelQueue(model_id, self.pool, task.run, self.executor, batch=task.batch, max_batch=cfg.max_batch_size,
                           window=cfg.batch_window_ms / 1000, refill=cfg.batch_refill_ms / 1000, limit=cfg.queue_limit,
                           min_free=cfg.min_free_memory_for.get(model_id, cfg.min_free_memory))
            self.queues[model_id] = q
        return q


def load_model(model: CachedModel, device: str) -> Any:
    """Load ``model`` on ``device`` with its task's loader (blocking)."""
    task = task_for(model.task)
    assert task is not None
    return task.load(model, device)


def create_app(config: ServerConfig, device: str, budget: int | None, *, scan: bool = True) -> FastAPI:
    """The app for ``config`` on ``device`` with a budget of ``budget`` bytes (``None``: no limit).
    The cache is scanned in the background from startup (``/healthz`` answers at once, ``/readyz``
    and the model routes once it is read) unless ``scan`` is false; then the caller calls
    :func:`start` with the models itself."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        state: State = app.state.experts
        scanning = asyncio.create_task(_scan(state)) if scan else None
        try:
            yield
        finally:
            if scanning is not None:
                scanning.cancel()
            await asyncio.gather(*(q.close() for q in state.queues.values()))
            state.executor.shutdown(wait=False, cancel_futures=True)

    # the model requests' spans are expert_server.tracing's (no health-check spans, no input in them)
    app = FastAPI(title="HuggingGPT expert server", lifespan=lifespan, telemetry={"tracing": False})
    app.state.experts = State(config, device, budget, ThreadPoolExecutor(max_workers=4, thread_name_prefix=THREAD_PREFIX))
    app.add_exception_handler(ExpertError, _error)  # type: ignore[arg-type]
    app.add_api_route("/healthz", _healthz, methods=["GET"])
    app.add_api_route("/readyz", _readyz, methods=["GET"])
    app.add_api_route("/models", _list, methods=["GET"])
    # a plain Starlette route: FastAPI's parameter solving and its wrappers around the endpoint took
    # a fifth of the event loop's time per request (benchmarks.bench_experts --batching)
    app.add_route("/models/{model_id:path}", _infer, methods=["POST"])
    registry = registry_for(lambda: app.state.experts)

    async def metrics() -> Response:
        body, content_type = exposition(registry)
        return Response(body, headers={"Content-Type": content_type})

    app.add_api_route("/metrics", metrics, methods=["GET"])
    app.add_middleware(AccessGuard, config=config)
    return app


async def _scan(state: State) -> None:
    """Read the cache and import the libraries its models need, in a thread, then serve what it
    holds (``/readyz`` answers 200 from then on, so a load balancer sends no request that would
    wait for the imports)."""
    from .catalog import servable
    from .tasks import import_libraries

    models = await asyncio.to_thread(servable, state.config)
    await asyncio.to_thread(import_libraries, {m.library for m in models.values()})
    await start(state, models)


async def start(state: State, models: dict[str, CachedModel]) -> None:
    """Serve ``models`` from now on."""
    state.models = models
    state.pool = Pool(models, state.device, state.budget, load_model, state.executor)
    state.ready = True


async def _error(request: Request, exc: ExpertError) -> JSONResponse:
    model = request.path_params.get("model_id", "")
    level = logging.INFO if isinstance(exc, ClientClosed) else logging.WARNING
    log.log(level, "%s %s %s: %s", exc.status, request.method, shown(model or request.url.path), exc.message)
    headers = {"Retry-After": "5"} if exc.status == 503 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _healthz() -> dict:
    return {"status": "ok"}


async def _readyz(request: Request) -> JSONResponse:
    ready = request.app.state.experts.ready
    return JSONResponse({"status": "ready" if ready else "starting"}, status_code=200 if ready else 503)


def _ready(state: State) -> None:
    if not state.ready:
        raise NotReady("The expert server is still reading its model cache; try again in a few seconds.")


async def _list(request: Request) -> dict:
    state: State = request.app.state.experts
    _ready(state)
    rows = []
    for model_id, m in sorted(state.models.items()):
        assert state.pool is not None
        slot = state.pool.slots[model_id]
        rows.append({"id": model_id, "task": m.task, "state": state.pool.state(model_id), "reason": slot.refused,
                     "size_bytes": m.size_bytes, "library": m.library,
                     "loaded_bytes": slot.loaded.charged if slot.loaded else None, "loads": slot.loads,
                     "batches": asdict(q.stats) if (q := state.queues.get(model_id)) else asdict(BatchStats())})
    return {"models": rows, "device": state.device, "memory_budget_bytes": state.budget,
            "memory_used_bytes": state.pool.used if state.pool else 0,
            "memory_inputs_bytes": state.pool.inputs if state.pool else 0,
            "idle_seconds": round(time.monotonic() - state.last_request, 1)}


def _deadline(request: Request, config: ServerConfig) -> float:
    raw = request.headers.get("x-request-timeout")
    seconds = config.default_deadline
    if raw is not None:
        try:
            seconds = float(raw)
        except ValueError:
            raise BadPayload("X-Request-Timeout", "must be a number of seconds") from None
        if not seconds > 0:
            raise BadPayload("X-Request-Timeout", "must be a positive number of seconds")
    return time.monotonic() + min(seconds, config.max_deadline)


CHAT_PATH = "/v1/chat/completions"  # what huggingface_hub's chat_completion appends to a model's URL


async def _infer(request: Request) -> Response:
    state: State = request.app.state.experts
    # a chat model (audio/video-text-to-text) is asked as OpenAI's API: its path ends in CHAT_PATH
    model_id = request.path_params["model_id"].removesuffix(CHAT_PATH)
    known = state.models.get(model_id)
    # a model id the server does not serve is the caller's text: not put on the span
    with tracing.request_span(request.headers, model_id if known else "", known.task if known else ""):
        return await _answer(state, model_id, request)


async def _answer(state: State, model_id: str, request: Request) -> Response:
    state.last_request = time.monotonic()
    _ready(state)
    model = state.models.get(model_id)
    if model is None or state.pool is None:
        raise UnknownModel(f"Model {shown(model_id, 100)} is not served here (not in this server's cache, or not "
                           "allowed).")
    slot = state.pool.slots[model_id]
    if slot.refused:
        raise Refused(slot.refused)
    deadline = _deadline(request, state.config)
    future = await _admit(state, model_id, model.task, request, deadline)
    task = task_for(model.task)
    assert task is not None
    try:
        result = await _wait(request, future, deadline, model_id)
    finally:
        state.last_request = time.monotonic()  # idle from the end of the last answer
    reply = task.encode(result)
    if isinstance(reply, Binary):
        return Response(reply.data, media_type=reply.media_type)
    return JSONResponse(reply)


async def _admit(state: State, model_id: str, task_name: str, request: Request, deadline: float) -> asyncio.Future:
    """Read, decode and queue the request's input, its memory held from the first byte; returns
    the future of its job (which gives the memory back once run).

    Raises:
        ExpertError: refused on the way (without a traceback: its frames would keep the body and
            the decoded input alive after their memory was given back).
    """
    held = Held(state.pool, model_id)
    error: ExpertError | None = None
    try:
        task = task_for(task_name)
        assert task is not None
        body = await read_body(request, body_limit(task, state.config.max_body_bytes, state.config.max_text_chars),
                               held)
        content_type = request.headers.get("content-type", "")
        if task.text_only and len(body) <= INLINE_BODY_BYTES:
            item = _prepare(state, task_name, body, content_type, held.grow)
        else:
            item = await asyncio.to_thread(_prepare, state, task_name, body, content_type,
                                           held.from_thread(asyncio.get_running_loop()))
        del body
        return state.queue(model_id).submit(item, deadline, held.release)  # the job holds the item from now on
    except ExpertError as e:
        error = e.with_traceback(None)
        error.__context__ = error.__cause__ = None
    except BaseException:
        held.release()
        raise
    held.release()  # the body and the input are gone with the frames that held them
    raise error


INLINE_BODY_BYTES = 16 * 2**10
"""A text task's body up to this size is parsed on the event loop (tens of microseconds), not in a
worker thread: the thread's two hops (there and back, and the memory charged from it) took longer,
and the 16 requests of a batch came in later."""


def _prepare(state: State, task_name: str, body: bytes, content_type: str, charge: Any) -> Any:
    """The task's input from ``body`` (in a worker thread unless it is a small text body: parsing
    and decoding take time), the config's default parameters filled in, each decoded input charged
    (``charge(bytes)``) before it is decoded."""
    task = task_for(task_name)
    assert task is not None
    payload = parse_body(body, content_type, state.limits, charge)
    payload.parameters = {**state.config.default_parameters.get(task_name, {}), **payload.parameters}
    return task.prepare(payload)


async def _wait(request: Request, future: asyncio.Future, deadline: float, model_id: str) -> Any:
    """The job's result; cancels it (freeing its slot) when the client leaves or the deadline passes."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({future, watcher}, timeout=max(0.0, deadline - time.monotonic()),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if future in done:
        return future.result()
    future.cancel()
    if watcher in done:
        raise ClientClosed(f"The client left before {model_id} answered; its request was dropped.")
    raise DeadlineExceeded(f"The request to {model_id} did not finish before its deadline.")
