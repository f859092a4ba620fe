"""Live availability: which catalog models the configured backends can run right now."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from cachetools import LRUCache, TLRUCache

from ..experts.providers import ProviderPolicy, routable
from .models import LIVE, ModelCard

log = logging.getLogger(__name__)


class Availability:
    """Which models the configured backends can run right now (the paper's §3.2 filter on
    "models that can be served", with today's Hugging Face Inference Providers).

    Rules, first match wins:

    1. ``base_url`` set: every model is served (a gateway in the inference wire format);
    2. the model has a dedicated endpoint in ``endpoints``: served;
    3. no ``provider``: not served;
    4. the card knows its live providers: served iff the provider policy can run the card's task
       on one of them (:meth:`pipeline.experts.providers.ProviderPolicy.serves`: a provider name
       must be among them, a per-task override or pin applies, a policy needs one the installed
       client can call for the task); without a policy, ``provider`` among them (``"auto"``: any);
    5. otherwise the Hub is asked (``HfApi.model_info(id, expand=["inferenceProviderMapping"])``),
       the answer is cached per model for ``ttl`` seconds, and only mappings with status
       ``"live"`` count (:func:`live_providers`; a renamed repo's redirect is followed). When the
       Hub cannot be reached or answers an error, the last answer it gave for the model is used
       (the last known state, however old); a model it never answered for is "not served"
       (warning logged; that decision is cached for ``min(ttl, error_ttl)`` seconds) — a model
       that cannot be known to run is never offered. After a look-up finds the Hub unreachable (no connection,
       a timeout), further look-ups give up at once for ``error_ttl`` seconds instead of each
       waiting ``timeout`` (:attr:`hub_unreachable` says so, for messages).

    Args:
        provider: Inference Providers name (``"hf-inference"``, ``"fal-ai"``, ...), ``"auto"``, or None.
        base_url: gateway URL, or None.
        endpoints: model id → dedicated endpoint URL.
        token: Hugging Face token for Hub look-ups (never logged), or None for the library default.
        ttl: seconds a Hub answer stays valid.
        hub_endpoint: Hub URL (None: ``huggingface_hub``'s default, which honours ``HF_ENDPOINT``).
        timeout: seconds per Hub look-up.
        error_ttl: seconds a failed look-up is remembered.
        max_concurrency: Hub look-ups in flight at once.
        max_cached: models whose Hub answer is remembered at once (least recently used dropped first).
        policy: the provider policy (``[inference] provider`` and ``[inference.providers]``), or
            ``None`` for the bare ``provider`` rule.
    """

    def __init__(
        self,
        *,
        provider: str | None,
        base_url: str | None,
        endpoints: dict[str, str],
        token: str | None,
        ttl: float = 3600,
        hub_endpoint: str | None = None,
        timeout: float = 5.0,
        error_ttl: float = 60.0,
        max_concurrency: int = 8,
        max_cached: int = 4096,
        policy: ProviderPolicy | None = None,
    ) -> None:
        self.provider = provider
        self.policy = policy
        self.base_url = base_url
        self.endpoints = dict(endpoints)
        self.ttl = ttl
        self.error_ttl = min(ttl, error_ttl)
        self.timeout = timeout
        self._token = token
        self._hub_endpoint = hub_endpoint
        self._api: Any = None
        # model id -> (live providers, seconds to trust them); each answer expires after its own
        # seconds (``ttl`` for answers, ``error_ttl`` for failed look-ups).
        self._cache: TLRUCache[str, tuple[tuple[str, ...], float]] = TLRUCache(
            maxsize=max_cached, ttu=lambda _key, value, now: now + value[1], timer=time.monotonic
        )
        # model id -> the Hub's last answer, kept past its ttl for when the Hub is unreachable
        self._last_known: LRUCache[str, tuple[str, ...]] = LRUCache(maxsize=max_cached)
        self._inflight: dict[str, asyncio.Future[tuple[str, ...]]] = {}
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._quiet_until = 0.0
        self._unreachable_until = 0.0

    @property
    def hub_unreachable(self) -> bool:
        """Whether the last look-up found the Hub unreachable (within ``error_ttl`` seconds)."""
        return time.monotonic() < self._unreachable_until

    def known(self, card: ModelCard) -> bool | None:
        """Whether ``card`` is served, decided without the Hub; ``None`` if a look-up is needed."""
        if self.base_url:
            return True
        if card.id in self.endpoints:
            return True
        if not self.provider and not (self.policy and self.policy.per_task):
            return False
        providers = self.providers_of(card)
        if providers is None:
            return None
        return self._serves(card, providers)

    def providers_of(self, card: ModelCard) -> tuple[str, ...] | None:
        """``card``'s live providers in the Hub's order (the card's, else a still-valid Hub
        answer), or ``None`` when not known yet."""
        if card.providers is not None:
            return tuple(card.providers)
        cached = self._cache.get(card.id)
        return None if cached is None else cached[0]

    def looked_up(self, model_id: str) -> tuple[str, ...] | None:
        """Live providers of ``model_id`` from a still-valid Hub answer, or ``None`` if not looked up."""
        cached = self._cache.get(model_id)
        return None if cached is None else tuple(sorted(cached[0]))

    async def live_of(self, model_id: str) -> tuple[str, ...] | None:
        """``model_id``'s live providers in the Hub's order (a cached answer, else a look-up), or
        ``None`` when the Hub never answered for it (the provider checks then trust the names)."""
        live = await self._live_providers(model_id)
        return live if model_id in self._last_known else None

    def _serves(self, card: ModelCard, providers: Iterable[str]) -> bool:
        providers = tuple(routable(providers))
        if self.policy is not None:
            return self.policy.serves(card.task, card.id, providers)
        if self.provider == "auto":
            return bool(providers)
        return self.provider in providers

    async def filter(self, cards: list[ModelCard]) -> list[ModelCard]:
        """The cards whose models can run now, in the given order.

        Hub look-ups for several unknown cards run concurrently (at most ``max_concurrency``).
        Never raises for Hub trouble: unknown models are then left out (warning logged).
        """
        decided = [self.known(card) for card in cards]
        unknown = list(dict.fromkeys(card.id for card, ok in zip(cards, decided) if ok is None))
        if unknown:
            answers = await asyncio.gather(*(self._live_providers(model_id) for model_id in unknown))
            live = dict(zip(unknown, answers))
            decided = [self._serves(card, live[card.id]) if ok is None else ok for card, ok in zip(cards, decided)]
        return [card for card, ok in zip(cards, decided) if ok]

    async def _live_providers(self, model_id: str) -> tuple[str, ...]:
        cached = self._cache.get(model_id)
        if cached is not None:
            return cached[0]
        pending = self._inflight.get(model_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[tuple[str, ...]] = asyncio.get_running_loop().create_future()
        self._inflight[model_id] = future
        try:
            async with self._semaphore:
                live, ttl = await self._look_up(model_id)
            self._cache[model_id] = (live, ttl)
            future.set_result(live)
            return live
        except BaseException as e:  # cancellation: let waiters see it too
            future.set_exception(e)
            future.exception()  # mark retrieved
            raise
        finally:
            self._inflight.pop(model_id, None)

    def _warn(self, message: str, model_id: str) -> None:
        """Log a Hub failure: a warning at most once per ``error_ttl`` seconds, debug otherwise."""
        now = time.monotonic()
        if now >= self._quiet_until:
            self._quiet_until = now + self.error_ttl
            log.warning(message, model_id)
        else:
            log.debug(message, model_id)

    async def _look_up(self, model_id: str) -> tuple[tuple[str, ...], float]:
        """Live providers of ``model_id`` from the Hub and how long to trust the answer (seconds)."""
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

        if self.hub_unreachable:
            log.debug("availability: the Hub was unreachable moments ago; last known state of %s used", model_id)
            return self._last_known.get(model_id, ()), self.error_ttl
        if self._api is None:
            from huggingface_hub import HfApi

            self._api = HfApi(endpoint=self._hub_endpoint, token=self._token)
        try:
            info = await asyncio.to_thread(
                self._api.model_info, model_id, expand=["inferenceProviderMapping"], timeout=self.timeout
            )
        except RepositoryNotFoundError:
            log.info("availability: %s is not on the Hub (gone, private or gated); not offered", model_id)
            self._last_known[model_id] = ()
            return (), self.ttl
        except HfHubHTTPError as e:
            status = e.response.status_code if e.response is not None else "?"
            why = "refused the token" if status in (401, 403) else "failed"
            self._warn(f"availability: the Hub {why} ({status}) when checking %s; last known state used", model_id)
            return self._last_known.get(model_id, ()), self.error_ttl
        except Exception as e:  # connection refused, timeout, bad JSON: the Hub is unusable
            self._unreachable_until = time.monotonic() + self.error_ttl
            self._warn(
                f"availability: the Hub cannot be reached to check %s ({e.__class__.__name__}); last known state used",
                model_id,
            )
            return self._last_known.get(model_id, ()), self.error_ttl
        live = self._last_known[model_id] = live_in_order(info)
        if self.policy is not None:
            self.policy.seen_live.update(live)
        return live, self.ttl


def live_in_order(info: Any) -> tuple[str, ...]:
    """:func:`live_providers` in the Hub's order (the order the account prefers, which the
    client's ``provider="auto"`` follows)."""
    mapping = info.inference_provider_mapping
    if mapping is None:
        return ("hf-inference",) if getattr(info, "inference", None) == "warm" else ()
    return tuple(dict.fromkeys(m.provider for m in mapping if getattr(m, "status", None) == LIVE))


def live_providers(info: Any) -> frozenset[str]:
    """The Inference Providers that serve a model, from the Hub's model-info answer.

    Args:
        info: ``huggingface_hub.ModelInfo`` (``inference_provider_mapping``: list of mappings with
            ``provider`` and ``status``, or ``None`` when the answer had no such field;
            ``inference``: ``"warm"`` or ``None``).

    Returns:
        Provider names whose mapping has status ``"live"`` (``"staging"`` and ``"error"`` do not
        count). An answer *without* ``inferenceProviderMapping`` (the Hub's format before
        Inference Providers, still given by mirrors and gateways that ignore ``expand``) that
        says ``"inference": "warm"`` means the serverless Inference API, today's ``hf-inference``,
        serves the model: ``{"hf-inference"}``. Source: the recorded Hub answers in
        ``tests/fixtures/cassettes/`` (model info with ``"inference": "warm"`` and no mapping,
        followed by a 200 from ``router.huggingface.co/hf-inference``). An empty mapping means none.
    """
    mapping = info.inference_provider_mapping
    if mapping is None:
        return frozenset({"hf-inference"}) if getattr(info, "inference", None) == "warm" else frozenset()
    return frozenset(m.provider for m in mapping if getattr(m, "status", None) == LIVE)
