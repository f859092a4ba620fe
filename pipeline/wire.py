"""The HTTP wire under ``httpx2`` for the controller and the experts: :class:`AiohttpTransport`.

httpx2 (the client the ``openai`` SDK and ``huggingface_hub`` are built on) builds each request and
runs our hooks (reply bounds, the router, traces); one ``aiohttp`` session (C-accelerated parser,
one keep-alive pool) sends it. Measured on the event loop (``python -m benchmarks.bench_loop``):
httpx2's own transport (httpcore2 on anyio: a liveness probe of the pooled connection before every
request, pure-Python HTTP/1.1) cost about twice the loop CPU of the same POST over aiohttp, and
the controller's streamed planning answer about three times its reading over aiohttp.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
import httpx2
import yarl


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every session of :class:`AiohttpTransport` (httpx2's defaults), made
    once per process: building them loads the CA bundle, about 80 ms of CPU that would otherwise
    be paid inside the first run (:class:`~pipeline.experts.hub.HubRunner` asks for it at start-up)."""
    return httpx2.create_ssl_context()


_TIMEOUTS: tuple[tuple[type[BaseException], type[httpx2.TransportError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx2.ConnectTimeout),
    (asyncio.TimeoutError, httpx2.ReadTimeout),  # aiohttp's SocketTimeoutError, a read past ``read``
)
_FAILURES: tuple[tuple[type[BaseException], type[httpx2.TransportError]], ...] = (
    (aiohttp.ClientConnectorError, httpx2.ConnectError),  # refused, unresolvable, TLS handshake
    (aiohttp.ServerDisconnectedError, httpx2.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx2.RemoteProtocolError),  # a body cut short
    (aiohttp.ClientResponseError, httpx2.RemoteProtocolError),  # a malformed status line or header
    (aiohttp.ClientOSError, httpx2.ReadError),
    (aiohttp.ClientError, httpx2.NetworkError),
)


def _as_httpx(exc: BaseException, request: httpx2.Request) -> BaseException:
    """The ``httpx2`` error a failure of ``aiohttp`` (or its timeout) stands for, so that callers
    (``huggingface_hub``, :func:`pipeline.experts.hub.map_error`) see what the default transport
    raises; anything else unchanged."""
    for kinds in (_TIMEOUTS, _FAILURES):
        for theirs, ours in kinds:
            if isinstance(exc, theirs):
                return ours(f"{type(exc).__name__}: {exc}", request=request)
    return exc


class _AiohttpBody(httpx2.AsyncByteStream):
    """A reply body as ``aiohttp`` reads it, piece by piece (bounded by the response hooks above);
    released before its end, its connection is closed rather than reused."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._response, self._request = response, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._response.content.iter_any():
                yield piece
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _as_httpx(exc, self._request) from exc

    async def aclose(self) -> None:
        self._response.release()  # aiohttp closes a connection whose reply was not read to its end


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport that sends each request through one ``aiohttp`` session (made on the
    first request, in the running loop; closed by :meth:`aclose`).

    What httpx2 built is sent as it is: its headers (no header of aiohttp's own added), the body
    read whole (bodies of expert calls are bytes already), no redirect followed (httpx2 follows
    them, through the hooks), no cookie kept (httpx2 keeps them), the reply not decoded (httpx2
    decodes it while the hooks bound it). The request's httpx2 timeouts apply (``connect``: the
    TCP/TLS connect; ``pool``: the wait for a connection; ``read``: between two reads); TLS is
    :func:`tls_context`; ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY``, read when
    the transport is made, are honoured as httpx2 honours them (an ``http://`` proxy). Nothing else
    of the environment is read: no ``.netrc`` credentials are added (aiohttp's ``trust_env`` would
    add them, and look both up on a thread for every request).
    Failures are raised as the ``httpx2`` errors the default transport raises
    (``httpx2.ConnectError``, ``httpx2.ReadTimeout``, …).

    Args:
        max_connections: connections open at once (httpx2's default pool size).
        keepalive_seconds: how long an idle connection is kept (httpx2's default expiry).
    """

    def __init__(self, *, max_connections: int = 100, keepalive_seconds: float = 5.0) -> None:
        self._limits = (max_connections, keepalive_seconds)
        self._session: aiohttp.ClientSession | None = None
        self._proxies = urllib.request.getproxies_environment()

    def _proxy_for(self, url: httpx2.URL) -> str | None:
        """The proxy of the environment for ``url`` (``None``: none, or ``NO_PROXY`` names its host)."""
        proxy = self._proxies.get(url.scheme) or self._proxies.get("all")
        if proxy is None or urllib.request.proxy_bypass_environment(url.host, self._proxies):
            return None
        return proxy

    def _opened(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            limit, keepalive = self._limits
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=tls_context(), limit=limit, keepalive_timeout=keepalive),
                auto_decompress=False, trust_env=False, cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
            )
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request``; the reply's body is read as the caller iterates it.

        Raises:
            httpx2.TransportError: as the default transport (see the class).
        """
        seconds = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(total=None, connect=seconds.get("pool"), sock_connect=seconds.get("connect"),
                                        sock_read=seconds.get("read"))
        body = await request.aread()
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "transfer-encoding"]
        if body and "content-length" not in request.headers:
            headers.append(("Content-Length", str(len(body))))
        try:
            response = await self._opened().request(
                request.method, yarl.URL(str(request.url), encoded=True).with_user(None), headers=headers, data=body or None,
                allow_redirects=False, timeout=timeout, proxy=self._proxy_for(request.url),
            )
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _as_httpx(exc, request) from exc
        return httpx2.Response(response.status, headers=list(response.raw_headers), stream=_AiohttpBody(response, request),
                               extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()})

    async def aclose(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
