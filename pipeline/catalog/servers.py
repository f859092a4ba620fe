"""The team's own expert servers (``hugginggpt experts serve``): which models each one can serve now.

Each server answers ``GET {url}/models`` with ``{"models": [{"id", "task", "state", "reason",
"size_bytes", "library"}], "device", "memory_budget_bytes"}`` (the expert server contract,
``docs/experts.md``). A model counts as served for its task when its ``state`` is ``"loaded"`` or
``"on_disk"``; ``"refused"`` models are kept for ``hugginggpt catalog show`` but never offered.

The answers are remote output, hence untrusted: ids must look like Hub ids (or a task name, the
ControlNet annotators' address), tasks must be registry names, the body is read up to
:data:`MAX_LISTING_BYTES` and at most :data:`MAX_MODELS` entries are kept.

Besides the configured servers, the servers registered in the store by ``hugginggpt experts
launch`` (:class:`RegisteredServer`, read through a ``registry`` the bot gives) are asked, and
dropped when their record is removed or expires, without a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2
from cachetools import TTLCache

from ..tasks import TASKS

log = logging.getLogger(__name__)

SERVABLE_STATES = frozenset({"loaded", "on_disk"})
"""States of a listed model that the bot may call (the contract: ``refused`` cannot be served)."""
MAX_LISTING_BYTES = 4 * 1024 * 1024
"""Largest ``GET /models`` body read, in bytes."""
MAX_MODELS = 10_000
"""Models kept from one listing."""
MAX_URL_CHARS = 2048
"""Longest registered server URL used (a longer one is left out, logged)."""
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")


@dataclass(frozen=True)
class ServerModel:
    """One model an expert server lists.

    Attributes:
        id: Hub id (``google/vit-base-patch16-224``) or, for a ControlNet annotator, the task name.
        task: registry task name.
        state: ``"loaded"``, ``"on_disk"`` or ``"refused"``.
        reason: one sentence when refused, else ``None``.
        size_bytes: bytes of weights on disk, or ``None``.
        library: ``"transformers"``, ``"diffusers"``, ``"controlnet_aux"``, ``"opencv"`` (as listed).
    """

    id: str
    task: str
    state: str
    reason: str | None = None
    size_bytes: int | None = None
    library: str | None = None

    @property
    def servable(self) -> bool:
        """Whether the bot may call it (``loaded`` or ``on_disk``)."""
        return self.state in SERVABLE_STATES


@dataclass(frozen=True)
class RegisteredServer:
    """An expert server registered in the store by ``hugginggpt experts launch``
    (:mod:`bot.store.sql.experts`).

    Attributes:
        url: its base URL (no trailing slash).
        key: the API key sent to it as ``Authorization: Bearer`` (a secret: left out of the repr).
        expires: when the record expires, epoch seconds (the launch's deadline).
    """

    url: str
    key: str = field(repr=False)
    expires: float


Registry = Callable[[], Awaitable[Sequence[RegisteredServer]]]
"""What reads the live registered servers (the bot's store); raises when it cannot."""


@dataclass(frozen=True)
class Listing:
    """One server's answer (or its absence).

    Attributes:
        url: the server's base URL as configured (no trailing slash).
        models: what it lists, in its order; ``()`` when it could not be asked.
        reachable: whether the last ``GET /models`` succeeded.
        device: the device it reports (``"cpu"``, ``"cuda:0"``), or ``None``.
    """

    url: str
    models: tuple[ServerModel, ...] = ()
    reachable: bool = True
    device: str | None = None


def parse_listing(url: str, body: Any) -> Listing:
    """A ``GET /models`` JSON body as a :class:`Listing`; entries that break the contract are
    dropped (debug log), never raised.

    Raises:
        ValueError: the body is not an object with a ``models`` list.
    """
    if not isinstance(body, dict) or not isinstance(body.get("models"), list):
        raise ValueError('the answer is not an object with a "models" list')
    kept: list[ServerModel] = []
    for item in body["models"][:MAX_MODELS]:
        model = _model(item)
        if model is None:
            log.debug("expert server %s: entry %.200r left out (not in the contract's shape)", url, item)
            continue
        kept.append(model)
    device = body.get("device")
    return Listing(url, tuple(kept), True, device if isinstance(device, str) else None)


def _usable(record: RegisteredServer) -> RegisteredServer | None:
    """``record`` with its URL normalised, or ``None`` (logged, the URL cut) when it is not an
    http(s) URL of at most :data:`MAX_URL_CHARS` characters: the store is read, not trusted."""
    url = record.url.strip().rstrip("/")
    try:
        parts = urlsplit(url) if len(url) <= MAX_URL_CHARS else None
        host = parts.hostname if parts is not None else None
    except ValueError:
        parts = host = None
    if parts is None or parts.scheme not in ("http", "https") or not host or parts.query or parts.fragment:
        log.warning("a registered expert server's URL %.80r is not an http(s) base URL; it is left out", url)
        return None
    return RegisteredServer(url, record.key, record.expires)


def _model(item: Any) -> ServerModel | None:
    if not isinstance(item, dict):
        return None
    mid, task, state = item.get("id"), item.get("task"), item.get("state")
    if not isinstance(mid, str) or not _MODEL_ID.match(mid) or ".." in mid:
        return None
    if not isinstance(task, str) or task not in TASKS or state not in ("loaded", "on_disk", "refused"):
        return None
    reason = item.get("reason")
    size = item.get("size_bytes")
    library = item.get("library")
    return ServerModel(
        mid, task, state,
        reason=reason[:300] if isinstance(reason, str) else None,
        size_bytes=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        library=library[:40] if isinstance(library, str) else None,
    )


class ExpertServers:
    """The configured and registered expert servers and what they list, asked concurrently and
    cached briefly.

    Args:
        urls: base URLs, in the order they are preferred (``[inference] experts_url``).
        ttl: seconds one server's answer is reused (``[inference] experts_ttl``); a server that
            could not be asked counts as listing nothing for as long. Also the seconds the
            registered servers read from ``registry`` are reused.
        timeout: seconds for one ``GET /models`` (``[inference] experts_timeout``).
        keys: URL → API key sent as ``Authorization: Bearer KEY`` to that server
            (``[inference] experts_api_keys``).
        registry: reads the servers registered in the store (``hugginggpt experts launch``), or
            ``None``; they follow the configured ones, and their keys join :attr:`keys`.

    Attributes:
        urls: the servers asked now: the configured ones, then the registered live ones.
        keys: URL → API key of every server in :attr:`urls`, kept up to date in place (the
            hub's :class:`pipeline.config.ExpertAccess` may read this same mapping).

    A server that is down is logged once (a warning when it goes down, an info line when it is
    back), never raised: it serves nothing until it answers again. Close with :meth:`aclose`.
    """

    def __init__(self, urls: list[str], *, ttl: float, timeout: float,
                 keys: dict[str, str] | None = None, registry: Registry | None = None) -> None:
        self.configured = list(dict.fromkeys(u.rstrip("/") for u in urls))
        self.urls = list(self.configured)
        self.keys = {u.rstrip("/"): k for u, k in (keys or {}).items()}
        self.ttl = ttl
        self.timeout = timeout
        self.registry = registry
        self._registered: dict[str, RegisteredServer] = {}
        self._read_at = float("-inf")
        self._reading: asyncio.Task[None] | None = None
        self._registry_down = False
        self._cache: TTLCache[str, Listing] = TTLCache(maxsize=len(self.urls) + 64, ttl=max(ttl, 1e-6),
                                                      timer=time.monotonic)
        self._inflight: dict[str, asyncio.Task[Listing]] = {}
        self._down: set[str] = set()
        self._client: httpx2.AsyncClient | None = None

    async def listings(self) -> list[Listing]:
        """Every server's listing, in configured order, then the registered ones (fresh ones
        from the cache, the others asked concurrently; one request per server however many
        callers wait). The registered servers are read again when older than ``ttl``."""
        await self.follow_registry()
        return list(await asyncio.gather(*(self._listing(url) for url in self.urls)))

    async def follow_registry(self) -> None:
        """Bring :attr:`urls` and :attr:`keys` up to date with the registry: read it again when
        the last read is older than ``ttl`` (one read however many callers wait), and drop the
        records that expired since. A failed read is logged once and keeps the last records
        until they expire."""
        if self.registry is None:
            return
        if time.monotonic() - self._read_at >= self.ttl:
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._read_registry())
                self._reading.add_done_callback(lambda _t: setattr(self, "_reading", None))
            await asyncio.shield(self._reading)
        self._apply(list(self._registered.values()))

    async def _read_registry(self) -> None:
        try:
            records = await self.registry()  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - the configured servers still serve; said once
            if not self._registry_down:
                log.warning("the registered expert servers cannot be read (%s: %s); the last ones read are used "
                            "until their records expire", type(e).__name__, str(e)[:200])
            self._registry_down = True
            return
        finally:
            self._read_at = time.monotonic()
        if self._registry_down:
            log.info("the registered expert servers can be read again")
        self._registry_down = False
        self._registered = {r.url: r for r in map(_usable, records) if r is not None}

    def _apply(self, records: list[RegisteredServer]) -> None:
        """Set :attr:`urls` and :attr:`keys` to the configured servers plus the live ``records``."""
        now = time.time()
        live = {r.url: r for r in records if r.expires > now and r.url not in self.configured}
        before = self.urls[len(self.configured):]
        for url in before:
            if url not in live:
                log.info("expert server %s is no longer registered; its models are not offered", url)
                self.keys.pop(url, None)
                self._cache.pop(url, None)
                self._down.discard(url)
        for url, record in live.items():
            if url not in before:
                log.info("expert server %s is registered (until %s); its models are offered", url,
                         time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.expires)))
            self.keys[url] = record.key
        self.urls = self.configured + list(live)

    def unreachable(self) -> list[str]:
        """URLs whose last ``GET /models`` failed."""
        return [u for u in self.urls if u in self._down]

    async def servers_of(self, task: str, model: str) -> list[str]:
        """URLs that list ``model`` as servable for ``task``, in configured order."""
        return [lst.url for lst in await self.listings()
                if any(m.id == model and m.task == task and m.servable for m in lst.models)]

    async def models_for(self, task: str) -> dict[str, tuple[ServerModel, list[str]]]:
        """Servable models of ``task``: id → (its entry on the first server listing it, every URL
        listing it in configured order). Insertion order: first server first, its own order."""
        out: dict[str, tuple[ServerModel, list[str]]] = {}
        for lst in await self.listings():
            for m in lst.models:
                if m.task != task or not m.servable:
                    continue
                if m.id in out:
                    out[m.id][1].append(lst.url)
                else:
                    out[m.id] = (m, [lst.url])
        return out

    def forget(self, url: str) -> None:
        """Drop ``url``'s cached listing (its server refused a connection): the next question asks it again."""
        self._cache.pop(url.rstrip("/"), None)

    async def _listing(self, url: str) -> Listing:
        cached = self._cache.get(url)
        if cached is not None:
            return cached
        task = self._inflight.get(url)
        if task is None:
            task = self._inflight[url] = asyncio.ensure_future(self._fetch(url))
            task.add_done_callback(lambda _t, u=url: self._inflight.pop(u, None))
        return await asyncio.shield(task)

    async def _fetch(self, url: str) -> Listing:
        try:
            listing = parse_listing(url, await self._get_json(f"{url}/models", self.keys.get(url)))
        except Exception as e:  # noqa: BLE001 - a server that is down or broken serves nothing
            if url not in self._down:
                self._down.add(url)
                log.warning("expert server %s cannot be asked which models it serves (%s: %s); its models are "
                            "not offered until it answers", url, type(e).__name__, str(e)[:200])
            listing = Listing(url, (), False)
        else:
            if url in self._down:
                self._down.discard(url)
                log.info("expert server %s answers again (%d models)", url, len(listing.models))
        if self.ttl > 0:
            self._cache[url] = listing
        return listing

    async def _get_json(self, url: str, key: str | None) -> Any:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=self.timeout, follow_redirects=False)
        headers = {"accept": "application/json", **({"authorization": f"Bearer {key}"} if key else {})}
        async with self._client.stream("GET", url, headers=headers) as response:
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_LISTING_BYTES:
                    raise ValueError(f"the answer is larger than {MAX_LISTING_BYTES} bytes")
                chunks.append(chunk)
        return json.loads(b"".join(chunks))

    async def aclose(self) -> None:
        """Close the HTTP client and stop fetches under way."""
        for task in [*self._inflight.values(), *([self._reading] if self._reading else [])]:
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
