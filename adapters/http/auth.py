"""Who may call the HTTP API, and how often.

* Keys: ``Authorization: Bearer KEY`` (as the OpenAI API) against ``[server] api_keys``; each key
  has a public *key id* (the first 12 hex digits of its SHA-256) that names its conversations and
  budgets, so the secret itself is never stored or logged.
* No key configured: the server only binds to loopback (checked at start, ``hugginggpt/serve.py``)
  and only answers loopback peers; the key id is then ``"local"``. Nothing secret is generated.
* File links: ``/v1/files/{id}?exp=...&sig=...`` carries an HMAC-SHA256 of the file id and the
  link's expiry under the owning key, so a chat UI's ``<img>`` (which sends no ``Authorization``
  header) can show the file until ``[server] link_ttl`` has passed, while nobody without the key
  can forge a link to another file or extend one (:mod:`adapters.http.links`).
* Budgets per key: ``rate_limit_per_minute`` and ``max_concurrent_runs``; both answer 429 with
  ``Retry-After``. Kept in the conversation store through the service, so several server
  processes share them (``Service.take_rate``/``take_slot``); without a service (signing links
  only), in this process (aiolimiter leaky bucket, :class:`bot.limits.RateLimiter`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.limits import RateLimiter
from bot.settings import ServerSettings

from .errors import ApiError

if TYPE_CHECKING:
    from bot.service import Service

log = logging.getLogger("adapters.http")

LOCAL_KEY_ID = "local"
"""Key id of every request when no API key is configured (loopback only)."""


def key_id(key: str) -> str:
    """The public id of an API key: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its key id and the key (``None`` without configured keys)."""

    key_id: str
    key: str | None


class Keys:
    """The configured API keys and the per-key budgets.

    Args:
        settings: ``[server]`` settings.
        shared: the service whose budgets, kept in its store, every server process shares
            (``Service.take_rate``/``take_slot``), or ``None`` for budgets in this process.
    """

    def __init__(self, settings: ServerSettings, shared: Service | None = None) -> None:
        self._by_id = {key_id(k.get_secret_value()): k.get_secret_value() for k in settings.api_keys
                       if k.get_secret_value()}
        self.per_minute = settings.rate_limit_per_minute
        self.max_concurrent = settings.max_concurrent_runs
        self._rate = RateLimiter(settings.rate_limit_per_minute, 60.0)
        self._active: dict[str, int] = {}
        self.shared = shared
        self._releasing: set[asyncio.Task] = set()

    @property
    def required(self) -> bool:
        """Whether clients must send a key (at least one is configured)."""
        return bool(self._by_id)

    def authenticate(self, authorization: str | None, peer: str | None) -> Caller:
        """The caller of a request.

        Args:
            authorization: the ``Authorization`` header, if any.
            peer: the client's address.

        Raises:
            ApiError: 401 when the key is missing or wrong (or, with no key configured, the peer
                is not on loopback).
        """
        if not self.required:
            if not is_loopback(peer):
                raise ApiError(401, "This server has no API keys configured and only answers its own host.",
                               "invalid_api_key")
            return Caller(LOCAL_KEY_ID, None)
        scheme, _, given = (authorization or "").partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            raise ApiError(401, "You didn't provide an API key: send it as 'Authorization: Bearer KEY'.",
                           "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        kid = key_id(given)
        known = self._by_id.get(kid)
        if known is None or not hmac.compare_digest(known.encode(), given.encode()):
            raise ApiError(401, "Incorrect API key provided.", "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        return Caller(kid, known)

    def sign(self, caller_key_id: str, file_id: str, expires: int) -> str | None:
        """The link signature of ``file_id`` valid until ``expires`` (Unix seconds) for the key
        ``caller_key_id``: HMAC-SHA256 of ``"<file id>.<expires>"`` under the key, 32 hex digits
        (``None`` without keys). The expiry is inside the MAC, so it cannot be extended."""
        key = self._by_id.get(caller_key_id)
        if key is None:
            return None
        return hmac.new(key.encode(), f"{file_id}.{expires}".encode(), hashlib.sha256).hexdigest()[:32]

    def signature_ok(self, owner_key_id: str, file_id: str, expires: int, sig: str | None) -> bool:
        """Whether ``sig`` is the link signature of ``file_id`` and ``expires`` under its owner's key
        (constant-time comparison; says nothing about whether ``expires`` has passed)."""
        expected = self.sign(owner_key_id, file_id, expires)
        return bool(sig) and expected is not None and hmac.compare_digest(expected, sig or "")

    async def reserve(self, caller: Caller) -> Callable[[], None]:
        """Reserve one of the caller's concurrent runs; returns the function that gives it back
        (call it once, when the run ends). With the service, the slots are shared by every server
        process on its store (``Service.take_slot``); otherwise counted in this process.

        Raises:
            ApiError: 429 when the caller already has ``max_concurrent_runs`` runs in flight.
            StorageError: the shared store fails.
        """
        busy = ApiError(429, f"This API key already has {self.max_concurrent} request{'s' if self.max_concurrent != 1 else ''}"
                             " running; wait for one to finish.", "concurrency_limit_exceeded", headers={"Retry-After": "1"})
        if self.shared is not None:
            slot = await self.shared.take_slot(f"api:{caller.key_id}", self.max_concurrent)
            if slot is None:
                raise busy
            shared = self.shared

            def give_back() -> None:
                task = asyncio.get_running_loop().create_task(shared.release_slot(slot))
                self._releasing.add(task)
                task.add_done_callback(self._released)
            return give_back
        n = self._active.get(caller.key_id, 0)
        if n >= self.max_concurrent:
            raise busy
        self._active[caller.key_id] = n + 1

        def release() -> None:
            left = self._active.get(caller.key_id, 1) - 1
            if left > 0:
                self._active[caller.key_id] = left
            else:
                self._active.pop(caller.key_id, None)
        return release

    def _released(self, task: asyncio.Task) -> None:
        """A slot went back (or could not: one log line; its lease expires it anyway)."""
        self._releasing.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("could not give back a run slot: %s: %s", type(exc).__name__, exc)

    async def count_request(self, caller: Caller) -> None:
        """Count one request against the caller's rate budget.

        Raises:
            ApiError: 429 with ``Retry-After`` when the budget is spent.
        """
        if self.shared is not None:  # shared by every server process on the store
            wait = await self.shared.take_rate(f"api:{caller.key_id}", self.per_minute, 60.0)
        else:
            wait = await self._rate.try_acquire(caller.key_id)
        if wait:
            raise ApiError(429, f"Rate limit reached: this API key may send {self.per_minute} requests per minute; "
                                f"retry in {wait:.0f} s.", "rate_limit_exceeded",
                           headers={"Retry-After": str(max(1, round(wait)))})
