"""Send every request of ``huggingface_hub``'s HTTP sessions to a stand-in on 127.0.0.1, by path.

The real client builds provider URLs itself (``router.huggingface.co/{provider}/...``, fal's
``v3.fal.media`` downloads, the Hub's ``huggingface.co/api/models/...``); its public seams
``set_client_factory`` / ``set_async_client_factory`` take the ``httpx2`` clients it uses. These
transports keep method, path, query, headers and body, and only change where the connection
goes, so a stand-in that routes by path answers what the real hosts answered. The original host
travels in ``X-Original-Host`` for the stand-ins that care.

Use :func:`redirect_hub` as a context manager around a test (it restores the library defaults).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx2
from huggingface_hub.utils import _http as hf_http
from huggingface_hub.utils import set_client_factory

from pipeline.experts import http as expert_http


class Where:
    """Where a path goes: ``hub`` (paths under ``/api/``) or ``url`` (every other path)."""

    def __init__(self, url: str, hub: str | None = None) -> None:
        self.url, self.hub = httpx2.URL(url), httpx2.URL(hub or url)

    def __call__(self, path: str) -> httpx2.URL:
        return self.hub if path.startswith("/api/") else self.url


def _to(request: httpx2.Request, where: Where) -> None:
    base = where(request.url.path)
    request.headers["X-Original-Host"] = request.url.host
    request.url = request.url.copy_with(scheme=base.scheme, host=base.host, port=base.port)
    request.headers["Host"] = base.netloc.decode("ascii")


class AsyncToLoopback(httpx2.AsyncBaseTransport):
    """Async transport: every request to ``url`` (path kept)."""

    def __init__(self, url: str, hub: str | None = None) -> None:
        self.base = Where(url, hub)
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        _to(request, self.base)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class ToLoopback(httpx2.BaseTransport):
    """Sync transport (``HfApi``, the client's provider-mapping look-ups): every request to ``url``."""

    def __init__(self, url: str, hub: str | None = None) -> None:
        self.base = Where(url, hub)
        self.inner = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        _to(request, self.base)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


@contextlib.contextmanager
def redirect_hub(url: str, hub: str | None = None) -> Iterator[AsyncToLoopback]:
    """Route ``huggingface_hub``'s sync sessions to ``url`` (``/api/`` paths to ``hub`` if
    given); yields the async transport to give :class:`pipeline.experts.hub.HubRunner`
    (``transport=``). Restores the defaults after."""
    set_client_factory(lambda: httpx2.Client(transport=ToLoopback(url, hub), follow_redirects=True, timeout=None,
                                             event_hooks={"request": [hf_http.hf_request_event_hook]}))
    try:
        yield AsyncToLoopback(url, hub)
    finally:
        set_client_factory(hf_http.default_client_factory)
        expert_http.install()
