"""The HTTP session the expert calls use: reply bodies bounded while they arrive, and gateways that
``HF_HUB_OFFLINE`` does not block.

``huggingface_hub``'s ``AsyncInferenceClient`` reads every reply whole (``response.content``) from
the ``httpx2.AsyncClient`` that ``huggingface_hub.get_async_session()`` builds. Its public hook,
``set_async_client_factory``, is used here (:func:`install`) to give every such session two event
hooks of ours:

* a **response hook** that bounds the body while it arrives (:func:`pipeline.bounded.bound_body`):
  past the limit the read stops with :class:`ReplyTooLarge` and httpx closes the response, which
  closes the connection; a ``Content-Length`` over the limit is refused before any of it is read.
* a **response hook** that refuses a redirect to another origin of a request that carried a body
  (:func:`refuse_redirect`): the user's file is never re-sent to a host the call was not made to.
* a **request hook** that adds the run's W3C ``traceparent`` when tracing is on
  (:func:`send_trace_context`);
* a **request hook** that lets a call go out under ``HF_HUB_OFFLINE=1`` when its URL is the
  configured gateway or dedicated endpoint of the current call (``HF_HUB_OFFLINE`` means "no
  HTTP calls to the Hugging Face Hub"; the operator's own gateway is not the Hub); every other
  request goes through ``huggingface_hub``'s own hook, which refuses it offline.

The session's wire is :class:`pipeline.wire.AiohttpTransport`: httpx2 builds each request and
runs the hooks above, one ``aiohttp`` session sends it.

A JSON list reply of objects longer than ``max_items`` is cut to the best-scored items as it is
handed to the client (:func:`cap_items`), so the client never parses the rest (parsing costs
about 0.1 ms per item).

Which limit applies comes from the current call's :class:`CallScope` (a context variable set by
:class:`pipeline.experts.hub.HubRunner` around each call); a request made outside a scope is
neither bounded nor let through offline, i.e. it behaves as ``huggingface_hub``'s default session.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import httpx2
from huggingface_hub import constants
from huggingface_hub.utils import set_async_client_factory
from huggingface_hub.errors import OfflineModeIsEnabled

from .. import tracing
from ..bounded import BoundedStream, bound_body
from ..tasks.base import ReplyKind
from ..wire import AiohttpTransport, tls_context


class ReplyTooLarge(Exception):
    """A reply body was larger than its limit; the read stopped there.

    Attributes:
        limit: the limit in bytes.
        setting: the TOML key that sets it (``"[inference] max_media_bytes"``).
        seen: bytes counted when the read stopped (decoded), or the declared ``Content-Length``.
        url: the URL that answered.
    """

    def __init__(self, limit: int, setting: str, seen: int, url: str) -> None:
        super().__init__(f"reply from {url} over {setting} = {limit} bytes (stopped at {seen} bytes)")
        self.limit, self.setting, self.seen, self.url = limit, setting, seen, url


class RedirectRefused(Exception):
    """A request that carried a body (the user's file, the prompt) was answered with a redirect to
    another origin; it is not followed, so the body is never sent there.

    Attributes:
        url: the URL that answered. location: where it pointed (``scheme://host:port`` only).
    """

    def __init__(self, url: str, location: str) -> None:
        super().__init__(f"{url} redirected a request with a body to {location}; not followed")
        self.url, self.location = url, location


class ReplyEncodingRefused(Exception):
    """A reply used a content encoding other than gzip, deflate or identity (none other is asked
    for; its decoded size could not be bounded)."""


@dataclass(frozen=True)
class CallScope:
    """Limits and routing of one expert call.

    Attributes:
        reply: :data:`pipeline.tasks.base.ReplyKind` of the task: ``"media"`` replies with an
            ``image/*``, ``audio/*``, ``video/*`` or ``application/octet-stream`` type and every
            ``"media-json"`` reply are bounded by ``max_media_bytes``, the rest by ``max_json_bytes``.
        max_json_bytes: bytes, ``[inference] max_json_bytes``.
        max_media_bytes: bytes, ``[inference] max_media_bytes``.
        gateway: ``scheme://host:port`` the call was routed to by configuration (``base_url`` or
            an ``endpoints`` entry), or ``None`` for provider routing.
        max_items: a JSON list reply of objects longer than this is cut to this many before the
            client parses it (:func:`cap_items`); ``None``: no cap.
        dropped: filled in during the call: how many items :func:`cap_items` dropped.
        send_token: ``False`` for a team's expert server: the ``Authorization`` header (the
            Hugging Face token, which the client adds to every call) is removed from requests to
            ``gateway``.
        bearer: with ``send_token`` false, the expert server's own API key, sent to ``gateway``
            instead as ``Authorization: Bearer`` (``[inference] experts_api_keys``).
        billed: filled in during the call: the seconds of compute each successful reply reported
            billing (:data:`COMPUTE_TIME`).
    """

    reply: ReplyKind
    max_json_bytes: int
    max_media_bytes: int
    gateway: str | None = None
    max_items: int | None = None
    dropped: list[int] = field(default_factory=list)
    send_token: bool = True
    bearer: str | None = field(default=None, repr=False)
    billed: list[float] = field(default_factory=list)

    def limit_for(self, content_type: str) -> tuple[int, str]:
        """``(limit in bytes, TOML key)`` for a reply of ``content_type``."""
        ctype = content_type.split(";")[0].strip().lower()
        media = ctype.startswith(("image/", "audio/", "video/")) or ctype == "application/octet-stream"
        if self.reply == "media-json" or (self.reply == "media" and media):
            return self.max_media_bytes, "[inference] max_media_bytes"
        return self.max_json_bytes, "[inference] max_json_bytes"


_scope: ContextVar[CallScope | None] = ContextVar("hugginggpt_expert_call", default=None)

BILL_TO: ContextVar[str | None] = ContextVar("hugginggpt_bill_to", default=None)
"""The organisation that pays the expert calls of the run in this context, over ``[inference]
bill_to`` (a Slack workspace's or Discord guild's own, ``[inference] bill_to_teams``): set by the
service before a run, inherited by the run's tasks; sent as ``X-HF-Bill-To`` to Hugging Face."""
BILL_TO_HEADER = "X-HF-Bill-To"
"""``huggingface_hub.constants.HUGGINGFACE_HEADER_X_BILL_TO``."""

COMPUTE_TIME = "x-compute-time"
"""The reply header in which Hugging Face inference servers (HF Inference, text-generation-inference)
report the seconds of compute a request took, e.g. ``x-compute-time: 0.111191439``: the seconds a
per-second price is charged for (:mod:`pipeline.cost`)."""
MAX_BILLED_SECONDS = 86400.0
"""A reported compute time above a day is not believed (not counted)."""


def billed_seconds(headers: httpx2.Headers) -> float | None:
    """The seconds of compute a reply reports (:data:`COMPUTE_TIME`), ``None`` when it reports none
    or a value that is not a finite number from 0 to :data:`MAX_BILLED_SECONDS`."""
    raw = headers.get(COMPUTE_TIME)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0.0 <= value <= MAX_BILLED_SECONDS else None  # NaN fails both comparisons


@contextlib.contextmanager
def call_scope(scope: CallScope) -> Iterator[None]:
    """Apply ``scope`` to every request made in this context (task) until the block ends."""
    token = _scope.set(scope)
    try:
        yield
    finally:
        _scope.reset(token)


def origin_of(url: str | httpx2.URL) -> str:
    """``scheme://host:port`` of ``url`` (default ports made explicit), lower case.

    A request's URL is read as httpx2 parsed it; a text URL is parsed once per process (the last
    256 kept): parsing costs about 0.1 ms of loop CPU, and each expert call asks several times."""
    if isinstance(url, str):
        return _origin_of_text(url)
    port = url.port or {"http": 80, "https": 443}.get(url.scheme, 0)
    return f"{url.scheme}://{url.host}:{port}".lower()


@functools.lru_cache(maxsize=256)
def _origin_of_text(url: str) -> str:
    return origin_of(httpx2.URL(url))


def _score(item: object) -> float:
    value = item.get("score") if isinstance(item, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("-inf")


def cap_items(value: object, max_items: int) -> tuple[object, int]:
    """Cut a JSON list of objects (or a list holding one such list, as classification answers
    come) to ``max_items``: the highest ``score`` first chosen (``heapq.nlargest``, O(n log k)),
    kept in their original order; objects without a score count as lowest.

    Returns:
        ``(value, dropped)``: the cut value (``value`` itself when nothing was cut) and how many
        items were dropped.
    """
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        inner, dropped = cap_items(value[0], max_items)
        return ([inner] if dropped else value), dropped
    if not isinstance(value, list) or len(value) <= max_items or not all(isinstance(x, dict) for x in value):
        return value, 0
    best = heapq.nlargest(max_items, range(len(value)), key=lambda i: (_score(value[i]), -i))
    return [value[i] for i in sorted(best)], len(value) - max_items


class _ItemCappedStream(BoundedStream):
    """A bounded JSON body whose list of items is cut to ``scope.max_items`` (:func:`cap_items`);
    without a scope, the bounded body as it is."""

    def __init__(self, *args: object, scope: CallScope | None = None) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self._scope = scope

    async def __aiter__(self) -> AsyncIterator[bytes]:
        scope = self._scope
        if scope is None or scope.max_items is None:
            async for piece in self.body():
                yield piece
            return
        # a JSON reply that may hold a list of items: read it whole (within the limit), cut it
        parts = [piece async for piece in self.body()]
        body = b"".join(parts)
        del parts
        try:
            value = json.loads(body)
        except ValueError:
            yield body  # not JSON after all: the client says what it makes of it
            return
        value, dropped = cap_items(value, scope.max_items)
        if dropped:
            scope.dropped.append(dropped)
            body = json.dumps(value).encode()
        yield body


async def bound_reply(response: httpx2.Response) -> None:
    """Response hook: bound the body of a reply made inside a :class:`CallScope`.

    Raises:
        ReplyTooLarge: the declared ``Content-Length`` is over the limit (nothing of the body read).
        ReplyEncodingRefused: a content encoding other than gzip/deflate/identity.
    """
    scope = _scope.get()
    if scope is None:
        return
    if response.status_code < 300:
        seconds = billed_seconds(response.headers)
        if seconds is not None:
            scope.billed.append(seconds)
    limit, setting = scope.limit_for(response.headers.get("content-type", ""))
    request = response.request

    def url() -> str:  # for the error, only when there is one
        return str(request.url.copy_with(query=None))

    ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
    json_ok = response.status_code < 300 and (ctype == "application/json" or ctype.endswith("+json"))

    bound_body(
        response, limit,
        too_large=lambda seen: ReplyTooLarge(limit, setting, seen, url()),
        refused_encoding=lambda values: ReplyEncodingRefused(f"reply from {url()} with content encoding {values}"),
        stream=functools.partial(_ItemCappedStream, scope=scope if json_ok else None),
    )


async def refuse_redirect(response: httpx2.Response) -> None:
    """Response hook: inside a :class:`CallScope`, a redirect to another origin of a request that
    carried a body raises :class:`RedirectRefused` (httpx would re-send the body there on a 307 or
    308). Redirects within the same origin, and of requests without a body (a provider's output
    fetched by URL), are followed as before.

    Raises:
        RedirectRefused: a cross-origin redirect of a request with a body.
    """
    request = response.request
    if _scope.get() is None or not response.has_redirect_location or request.method in ("GET", "HEAD"):
        return
    target = request.url.join(response.headers["location"])
    if origin_of(target) != origin_of(request.url):
        raise RedirectRefused(str(request.url.copy_with(query=None)), origin_of(target))


async def allow_gateway_offline(request: httpx2.Request) -> None:
    """Request hook doing what ``huggingface_hub``'s own does (refuse every request when
    ``HF_HUB_OFFLINE`` is set; a request id in ``X-Amzn-Trace-Id`` for server-side debugging),
    except that a request to the current call's configured gateway is let through offline, and
    loses its ``Authorization`` header when the scope says so (expert servers never get the token;
    they get their own key, ``CallScope.bearer``). Other expert calls name the run's payer
    (:data:`BILL_TO`) when it has one.

    Raises:
        OfflineModeIsEnabled: offline, and not the gateway.
    """
    scope = _scope.get()
    to_gateway = scope is not None and scope.gateway is not None and origin_of(request.url) == scope.gateway
    if to_gateway and scope is not None and not scope.send_token:
        request.headers.pop("authorization", None)
        if scope.bearer:
            request.headers["authorization"] = f"Bearer {scope.bearer}"
    elif scope is not None and BILL_TO.get():
        request.headers[BILL_TO_HEADER] = BILL_TO.get() or ""
    if constants.is_offline_mode() and not to_gateway:
        raise OfflineModeIsEnabled(f"Cannot reach {request.url}: offline mode is enabled (HF_HUB_OFFLINE).")
    request.headers.setdefault("X-Amzn-Trace-Id", request.headers.get("X-Request-Id") or str(uuid.uuid4()))


async def send_trace_context(request: httpx2.Request) -> None:
    """Request hook: the current span's W3C ``traceparent`` on the request
    (:func:`pipeline.tracing.inject`), so that an expert server or any traced backend continues the
    run's trace; nothing when tracing is off."""
    tracing.inject(request.headers)


async def read_error_body(response: httpx2.Response) -> None:
    """Response hook: an error reply's body (under 1 MB, as ``huggingface_hub``'s own hook reads it)
    is read before the client raises, so the error carries the server's message."""
    if response.status_code >= 400:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) < 1_000_000:
            await response.aread()


ROUTER = "https://router.huggingface.co"
"""The Inference Providers router as ``huggingface_hub`` builds its URLs
(``constants.INFERENCE_PROXY_TEMPLATE`` and the auto-router)."""


def to_router(router_url: str) -> Callable[[httpx2.Request], Awaitable[None]]:
    """A request hook sending every request for :data:`ROUTER` to ``router_url`` instead, path and
    query kept (``[inference] router_url``: an operator's egress proxy, or a stand-in that
    forwards by path). Requests to any other host are left alone."""
    base = httpx2.URL(router_url.rstrip("/"))
    prefix = base.path.rstrip("/")

    async def hook(request: httpx2.Request) -> None:
        if origin_of(request.url) != origin_of(ROUTER):
            return
        request.url = request.url.copy_with(scheme=base.scheme, host=base.host, port=base.port,
                                            path=prefix + request.url.path)
        request.headers["Host"] = base.netloc.decode("ascii")

    return hook


def bounded_async_client(*, router_url: str | None = None,
                         transport: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncClient:
    """``huggingface_hub``'s default async session plus :func:`bound_reply` and
    :func:`allow_gateway_offline`; asks only for gzip or deflate encoded replies.

    Args:
        router_url: requests for the router go there (:func:`to_router`), or ``None``.
        transport: the ``httpx2`` transport (``None``: a new :class:`AiohttpTransport`); a test
            stand-in's.
    """
    hooks: list[Callable[[httpx2.Request], Awaitable[None]]] = [allow_gateway_offline, send_trace_context]
    if router_url:
        hooks.insert(0, to_router(router_url))
    return httpx2.AsyncClient(
        verify=tls_context(),
        event_hooks={"request": hooks, "response": [refuse_redirect, bound_reply, read_error_body]},
        follow_redirects=True,
        timeout=None,
        headers={"Accept-Encoding": "gzip, deflate"},
        transport=transport or AiohttpTransport(),
    )


def install(*, router_url: str | None = None, transport: httpx2.AsyncBaseTransport | None = None) -> None:
    """Make :func:`bounded_async_client` (with ``router_url`` and ``transport``) the session
    factory of ``huggingface_hub``'s async clients (process-wide; the last call wins). Outside a
    :class:`CallScope` the session behaves as the library's default one."""
    set_async_client_factory(functools.partial(bounded_async_client, router_url=router_url, transport=transport))
