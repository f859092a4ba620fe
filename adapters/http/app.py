"""The HTTP API's application: the OpenAI-compatible routes, the reference implementation's
routes, health, readiness and Prometheus metrics, OpenAPI at ``/openapi.json`` (FastAPI).

Build it with :func:`create_app` (tests run the same app production runs, served by uvicorn on
loopback); ``hugginggpt/serve.py`` runs it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response

from bot.metrics import exposition

from bot.service import Service
from bot.settings import Settings

from . import openai_api, reference, responses
from .auth import Keys
from .common import CONVERSATION_HEADER, OPEN_WEBUI_CHAT_HEADER, State, state_of
from .errors import install_error_handlers
from .guard import BrowserGuard, default_hosts

CORS_HEADERS = ["Authorization", "Content-Type", CONVERSATION_HEADER, OPEN_WEBUI_CHAT_HEADER, "Mcp-Session-Id",
                "Mcp-Protocol-Version", "Last-Event-ID"]
"""Request headers a page of a ``[server] cors_origins`` origin may send."""


def create_app(settings: Settings, service: Service, *, version: str = "unknown",
               bound_host: str | None = None) -> FastAPI:
    """The ASGI application of ``hugginggpt serve``.

    Args:
        settings: all settings (``[server]`` for keys, limits, hosts and origins; ``[storage]`` for
            file limits).
        service: the running service (its lifecycle is the caller's).
        version: shown in the OpenAPI description.
        bound_host: the address the server is bound to (``--host``); default ``[server] host``.
            Names the default ``allowed_hosts`` (:func:`adapters.http.guard.default_hosts`).

    Returns:
        A FastAPI application; ``app.state.hugginggpt`` is its :class:`adapters.http.common.State`.
    """
    app = FastAPI(
        title="HuggingGPT", version=version,
        description="HuggingGPT (Shen et al., NeurIPS 2023) behind an OpenAI-compatible Chat Completions API and Responses API "
                    "(model `hugginggpt`) and the reference implementation's `/hugginggpt`, `/tasks`, `/results`. "
                    "Send `Authorization: Bearer KEY`; name a conversation with the `X-HuggingGPT-Conversation` header.",
        docs_url="/docs", redoc_url=None,
        # FastAPI's own request spans would carry a file link's signature (url.query): the turn's
        # spans are the service's own (pipeline.tracing), which hold no secret
        telemetry={"tracing": False},
    )
    app.state.hugginggpt = State(settings=settings, service=service, keys=Keys(settings.server, service))
    server = settings.server
    if server.cors_origins:  # only the pages the operator named (a chat UI calling from the browser)
        app.add_middleware(CORSMiddleware, allow_origins=server.cors_origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "DELETE", "OPTIONS"], allow_headers=CORS_HEADERS,
                           expose_headers=[CONVERSATION_HEADER, "Mcp-Session-Id"])
    # outermost: refuse foreign hosts, origins and body types before anything else runs
    app.add_middleware(BrowserGuard, cors_origins=server.cors_origins,
                       allowed_hosts=server.allowed_hosts or default_hosts(server, bound_host or server.host))
    install_error_handlers(app)
    app.include_router(openai_api.router, tags=["OpenAI-compatible"])
    app.include_router(responses.router, tags=["OpenAI-compatible"])
    app.include_router(reference.router)

    @app.get("/healthz", summary="Liveness", tags=["operations"])
    async def healthz() -> dict[str, str]:
        """200 while the process serves requests."""
        return {"status": "ok"}

    @app.get("/readyz", summary="Readiness", tags=["operations"])
    async def readyz(request: Request) -> Any:
        """200 when the service is up, the data directory has ``[server] ready_min_free_bytes``
        free and the conversation store answers and passes its integrity probe
        (``Service.storage_problems``); 503 with ``problems`` (sentences without paths) otherwise, and
        while shutting down."""
        st = state_of(request)
        if not st.ready:
            return JSONResponse({"status": "stopping"}, status_code=503)
        if problems := await st.service.storage_problems():
            return JSONResponse({"status": "not ready", "problems": problems}, status_code=503)
        return {"status": "ready", "model": openai_api.MODEL_ID, "controller": st.settings.llm.model}

    app.add_api_route("/metrics", metrics, summary="Prometheus metrics", tags=["operations"], response_class=Response)

    return app


async def metrics() -> Response:
    """The Prometheus text exposition of :mod:`bot.metrics` (runs, stages, tasks, expert calls,
    tokens, cost, runs in flight, loop lag, store errors): bounded labels, no user data."""
    body, content_type = await exposition()
    return Response(body, headers={"Content-Type": content_type})
