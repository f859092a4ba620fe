"""The expert server on Ray Serve: one deployment per model, one ingress deployment in front.

Each model named in ``deployments`` (or the config's ``[ray]`` table) gets its own deployment with
its options (``ray_actor_options={"num_gpus": 0.5}``, ``num_replicas``, ``autoscaling_config``...);
every other model shares the ``default`` deployment. A deployment runs the same ASGI app as a
plain server (:func:`expert_server.app.create_app`, limited to its models) in process, so requests
take the same code path: payload checks, the queue, the memory budget (the config's, else the
deployment's GPU share of the device), the error shapes. The ingress (``serve.ingress`` over a
FastAPI app) answers ``GET /models`` (all deployments' lists merged), ``/healthz``, ``/readyz``,
and forwards ``POST /models/{id}`` with its body, content type and ``X-Request-Timeout``.

    serve run expert_server.ray_serve:app_from_env     # HUGGINGGPT_EXPERTS_CONFIG=experts.toml

(No ``from __future__ import annotations`` here: ``serve.ingress`` rebinds the route methods, and
FastAPI must see ``Request`` as a class, not a string, to inject it.)
"""


import asyncio
import os
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from ray import serve

from .access import AccessGuard
from .config import ServerConfig, load_config

DEFAULT = "default"
ingress_app = FastAPI(title="HuggingGPT expert server (Ray Serve)", telemetry={"tracing": False})


@serve.deployment
class ModelServer:
    """One deployment: the expert server's app limited to ``models`` (or to all but ``exclude``)."""

    def __init__(self, config: dict, models: list[str], exclude: list[str], gpu_share: float = 1.0) -> None:
        from .app import create_app
        from .server import resolve_budget, resolve_device

        # the ingress calls this app in process as http://replica (no key: it is not on the network)
        cfg = ServerConfig(**{**config, "allow_models": models or config.get("allow_models", ["*"]),
                              "deny_models": [*config.get("deny_models", []), *exclude],
                              "allowed_hosts": ["replica"], "api_key": None})
        device = resolve_device(cfg.device)
        budget = cfg.memory_budget if cfg.memory_budget is not None else resolve_budget(None, device)
        if cfg.memory_budget is None and budget is not None and device.startswith("cuda"):
            budget = int(budget * gpu_share)
        self.app = create_app(cfg, device, budget, scan=False)
        self.config = cfg
        self._started: asyncio.Task | None = None

    async def _client(self) -> Any:
        import httpx2

        from .app import start
        from .catalog import servable

        if self._started is None:
            self._started = asyncio.ensure_future(start(self.app.state.experts, await asyncio.to_thread(servable, self.config)))
        await self._started
        return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.app), base_url="http://replica", timeout=None)

    async def models(self) -> dict:
        """This deployment's ``GET /models`` document."""
        async with await self._client() as http:
            return (await http.get("/models")).json()

    async def infer(self, model_id: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        """``POST /models/{model_id}`` on this replica: ``(status, content type, body)``."""
        async with await self._client() as http:
            r = await http.post(f"/models/{model_id}", content=body, headers=headers)
            return r.status_code, r.headers.get("content-type", "application/json"), r.content


@serve.deployment(ray_actor_options={"num_cpus": 0})  # it only routes: no CPU reserved
@serve.ingress(ingress_app)
class Ingress:
    """The HTTP front: routes each model to its deployment, after the access checks of a plain
    server (:class:`expert_server.access.AccessGuard`: Host, Origin, the API key) on every route but
    the health probes (Ray Serve freezes the FastAPI app when the module loads, so they run per route)."""

    def __init__(self, handles: dict[str, Any], config: dict) -> None:
        self.handles = handles
        self.guard = AccessGuard(None, ServerConfig(**config))

    @ingress_app.get("/healthz")
    async def healthz(self) -> dict:
        return {"status": "ok"}

    @ingress_app.get("/readyz")
    async def readyz(self) -> dict:
        return {"status": "ready"}

    @ingress_app.get("/models")
    async def models(self, request: Request) -> Any:
        refused = self.guard.response(request.scope, dict(request.headers))
        if refused is not None:
            return refused
        docs = await asyncio.gather(*(h.models.remote() for h in self.handles.values()))
        rows = sorted((row for d in docs for row in d["models"]), key=lambda r: r["id"])
        return {"models": rows, "device": docs[0]["device"] if docs else None,
                "memory_budget_bytes": sum(d["memory_budget_bytes"] or 0 for d in docs) or None}

    @ingress_app.post("/models/{model_id:path}")
    async def infer(self, model_id: str, request: Request) -> Response:
        refused = self.guard.response(request.scope, dict(request.headers))
        if refused is not None:
            return refused
        handle = self.handles.get(model_id) or self.handles[DEFAULT]
        headers = {k: v for k, v in request.headers.items() if k in ("content-type", "x-request-timeout")}
        status, ctype, content = await handle.infer.remote(model_id, await request.body(), headers)
        if ctype.startswith("application/json"):
            return Response(content, status_code=status, media_type="application/json")
        return Response(content, status_code=status, media_type=ctype)


def build_app(config: ServerConfig, deployments: dict[str, dict] | None = None) -> Any:
    """The Ray Serve application: ``deployments`` maps a model id to its deployment options (default:
    the config's ``[ray]`` table); all other models share one ``default`` deployment."""
    deployments = config.ray if deployments is None else deployments
    raw = config.model_dump(exclude={"ray"})
    handles = {}
    for i, (model_id, options) in enumerate(sorted(deployments.items())):
        share = float(options.get("ray_actor_options", {}).get("num_gpus", 1.0) or 1.0)
        handles[model_id] = ModelServer.options(name=f"model-{i}", **options).bind(raw, [model_id], [], share)
    handles[DEFAULT] = ModelServer.options(name=DEFAULT).bind(raw, [], sorted(deployments))
    return Ingress.bind(handles, raw)


def app_from_env(args: dict | None = None) -> Any:
    """For ``serve run expert_server.ray_serve:app_from_env`` (an application builder; ``args`` unused):
    the config file named by
    ``HUGGINGGPT_EXPERTS_CONFIG`` (optional)."""
    return build_app(load_config(os.environ.get("HUGGINGGPT_EXPERTS_CONFIG")))
