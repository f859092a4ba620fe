"""Where a model runs: the team's expert servers, Inference Providers (or a gateway, or a
dedicated endpoint), as ``[inference] mode`` allows.

HuggingGPT's hybrid inference endpoint (paper §3.3, the reference implementation's
``inference_mode: hybrid``): models deployed locally are preferred, the hosted endpoints serve
the rest. :class:`Placement` merges what the expert servers list (:class:`ExpertServers`) with
what the providers serve (:class:`Availability`) into ranked :class:`Candidate` objects, each
knowing its :class:`Route` objects, first to try first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from ..experts.providers import client_serves_anywhere
from .models import ModelCard
from .servers import ExpertServers, ServerModel

log = logging.getLogger(__name__)

Mode = Literal["providers", "local", "hybrid"]
RouteKind = Literal["local", "provider", "gateway", "endpoint"]


@dataclass(frozen=True)
class Route:
    """One place a model can run.

    Attributes:
        kind: ``"local"`` (an expert server of the team), ``"provider"`` (Inference Providers),
            ``"gateway"`` (``[inference] base_url``) or ``"endpoint"`` (a dedicated endpoint).
        target: the server's or gateway's base URL, the endpoint's URL, or the provider's name.
    """

    kind: RouteKind
    target: str

    @property
    def label(self) -> str:
        """``"local http://127.0.0.1:8081"``, ``"provider hf-inference"``, ``"gateway URL"``,
        ``"endpoint URL"``: what ``--json`` and ``catalog show`` print as ``where``."""
        return f"{self.kind} {self.target}"

    def url_for(self, model: str) -> str | None:
        """``{target}/models/{model}`` for an expert server (the HF inference wire format), else
        ``None`` (the hub runner routes providers, gateways and endpoints itself)."""
        return f"{self.target}/models/{model}" if self.kind == "local" else None

    def prompt_words(self) -> str:
        """How the controller is told where a candidate runs."""
        return {
            "local": "the team's own expert server (local, preferred)",
            "provider": f"Hugging Face Inference Providers ({self.target})",
            "gateway": "the configured inference gateway",
            "endpoint": "a dedicated Inference Endpoint",
        }[self.kind]


@dataclass(frozen=True)
class Candidate:
    """A model that can run a task now, and where.

    Attributes:
        card: its catalog card (a card made from the server's listing when the catalog lacks it).
        routes: where it runs, first to try first (never empty).
    """

    card: ModelCard
    routes: tuple[Route, ...]

    @property
    def id(self) -> str:
        """The model id."""
        return self.card.id

    @property
    def where(self) -> str:
        """The first route's label (:attr:`Route.label`)."""
        return self.routes[0].label

    @property
    def local(self) -> bool:
        """Whether it runs on an expert server first."""
        return self.routes[0].kind == "local"

    def prompt_view(self) -> dict[str, Any]:
        """The card's view for the selection prompt plus ``runs_on`` (paper §3.2)."""
        return {**self.card.prompt_view(), "runs_on": self.routes[0].prompt_words()}


@dataclass(frozen=True)
class TaskPaths:
    """Where one task can run now (``hugginggpt catalog show --coverage``).

    Attributes:
        task: the registry task.
        provider: its best candidate off the expert servers (Inference Providers, a gateway or an
            endpoint), or ``None``.
        server: its best candidate on the team's expert servers, or ``None``.
        why_not: when both are ``None``, one sentence saying why; else ``""``.
    """

    task: str
    provider: Candidate | None
    server: Candidate | None
    why_not: str = ""


def listed_card(model: ServerModel) -> ModelCard:
    """A card for a model an expert server lists but the catalog lacks (no download count)."""
    what = "ControlNet annotator" if model.id == model.task else (f"{model.library} model" if model.library else "model")
    size = f", {model.size_bytes / 1e6:,.0f} MB" if model.size_bytes else ""
    state = "loaded in memory" if model.state == "loaded" else "on disk"
    return ModelCard(model.id, model.task, 0, 0, f"{what} for {model.task} on the team's expert server ({state}{size}).",
                     None, ())


class Placement:
    """Ranked candidates and their routes, by ``mode``.

    Args:
        catalog: ``candidates(task)`` and ``get(id, task)`` (:class:`pipeline.catalog.Catalog`).
        availability: ``filter(cards)`` for providers (:class:`pipeline.catalog.Availability`);
            its ``provider``, ``base_url`` and ``endpoints`` name the provider route.
        servers: the expert servers, or ``None``.
        mode: ``"hybrid"`` (local first, providers after), ``"local"`` or ``"providers"``.
    """

    def __init__(self, catalog: Any, availability: Any, servers: ExpertServers | None = None, *,
                 mode: Mode = "hybrid") -> None:
        self.catalog = catalog
        self.availability = availability
        self.servers = servers if servers is not None and (servers.urls or servers.registry) else None
        self.mode: Mode = mode

    @property
    def uses_servers(self) -> bool:
        """Whether expert servers are asked (a server is configured and the mode allows it)."""
        return self.servers is not None and self.mode != "providers"

    @property
    def uses_providers(self) -> bool:
        """Whether providers, a gateway or endpoints are used (every mode but ``"local"``)."""
        return self.mode != "local"

    def provider_route(self, model: str) -> Route | None:
        """Where ``model`` runs off the expert servers: its dedicated endpoint, else the gateway,
        else the provider (``None`` when no provider is set)."""
        av = self.availability
        endpoints = getattr(av, "endpoints", None) or {}
        if model in endpoints:
            return Route("endpoint", endpoints[model])
        if getattr(av, "base_url", None):
            return Route("gateway", str(av.base_url).rstrip("/"))
        provider = getattr(av, "provider", "hf-inference")
        return Route("provider", provider) if provider else None

    def provider_routes(self, task: str, model: str) -> list[Route]:
        """Every place off the expert servers that runs ``model`` for ``task``, first first: its
        endpoint or the gateway (one route), else one route per provider in the provider
        policy's order (:meth:`pipeline.experts.providers.ProviderPolicy.order`, from the
        model's live providers as last looked up); empty when none serves it."""
        first = self.provider_route(model)
        policy = getattr(self.availability, "policy", None)
        if first is None and policy is None:
            return []
        if first is not None and first.kind != "provider" or policy is None:
            return [first] if first is not None else []
        card = self.catalog.get(model, task) or ModelCard(model, task, 0, 0, "", None, ())
        live = self.availability.providers_of(card) or ()
        return [Route("provider", p) for p in policy.order(task, model, live)]

    async def local_candidates(self, task: str) -> list[Candidate]:
        """Models of ``task`` the expert servers list: loaded before on disk, then by the
        catalog's ranking (downloads), then id. Empty unless :attr:`uses_servers`."""
        if not self.uses_servers or self.servers is None:
            return []
        listed = await self.servers.models_for(task)
        out = []
        for model_id, (model, urls) in listed.items():
            card = self.catalog.get(model_id, task) or listed_card(model)
            out.append((model.state != "loaded", -card.downloads, model_id,
                        Candidate(card, tuple(Route("local", u) for u in urls))))
        return [c for *_, c in sorted(out, key=lambda t: t[:3])]

    async def provider_candidates(self, task: str, want: int, skip: set[str]) -> list[Candidate]:
        """Up to ``want`` catalog models of ``task`` the providers serve now, best first, leaving
        out ``skip``; asked in slices so a Hub look-up is only made for models that may be used."""
        if not self.uses_providers or want <= 0:
            return []
        ranked = [c for c in self.catalog.candidates(task) if c.id not in skip]
        pinned = self.pinned(task)
        if pinned is not None:  # [inference.providers] "task" = "model:provider": that model only
            ranked = [c for c in ranked if c.id == pinned] or [ModelCard(pinned, task, 0, 0, "", None, ())]
        out: list[ModelCard] = []
        step = max(want, 5)
        for start in range(0, len(ranked), step):
            out += await self.availability.filter(list(ranked[start : start + step]))
            if len(out) >= want:
                break
        routed = [(card, self.provider_routes(task, card.id)) for card in out[:want]]
        return [Candidate(card, tuple(routes)) for card, routes in routed if routes]

    def pinned(self, task: str) -> str | None:
        """The model a per-task ``model:provider`` setting pins for ``task``, if any."""
        policy = getattr(self.availability, "policy", None)
        return policy.pinned_model(task) if policy is not None else None

    async def candidates(self, task: str, top_k: int) -> list[Candidate]:
        """At most ``top_k`` candidates of ``task``: local ones first (the paper's rule), then
        the providers'; when both exist, one place is kept for a provider candidate to fall back to."""
        local = await self.local_candidates(task)
        providers = await self.provider_candidates(task, top_k, {c.id for c in local})
        if local and providers and top_k > 1:
            kept = local[: top_k - 1]
            return kept + providers[: top_k - len(kept)]
        return (local or providers)[:top_k]

    async def local_routes(self, task: str, model: str) -> list[Route]:
        """The expert servers listing ``model`` for ``task`` now, in configured order."""
        if not self.uses_servers or self.servers is None:
            return []
        return [Route("local", u) for u in await self.servers.servers_of(task, model)]

    async def provider_fallback(self, task: str, model: str) -> Route | None:
        """The provider route of ``model`` when a provider serves it now (a catalog card, or a
        look-up for a model only a server listed); ``None`` otherwise or in ``"local"`` mode.
        ControlNet annotators (addressed by their task name) have no provider."""
        if not self.uses_providers or model == task:
            return None
        card = self.catalog.get(model, task) or ModelCard(model, task, 0, 0, "", None, ())
        if not await self.availability.filter([card]):
            return None
        routes = self.provider_routes(task, model)
        return routes[0] if routes else None

    async def provider_fallbacks(self, task: str, model: str) -> list[Route]:
        """:meth:`provider_fallback`, every provider route in the policy's order."""
        if not self.uses_providers or model == task:
            return []
        card = self.catalog.get(model, task) or ModelCard(model, task, 0, 0, "", None, ())
        if not await self.availability.filter([card]):
            return []
        return self.provider_routes(task, model)

    async def paths(self, task: str) -> TaskPaths:
        """Where ``task`` can run now: its first expert-server candidate and its first candidate
        off the servers (each ``None`` when there is none), and why not when neither exists."""
        local = await self.local_candidates(task)
        remote = await self.provider_candidates(task, 1, set())
        if local or remote:
            return TaskPaths(task, remote[0] if remote else None, local[0] if local else None)
        return TaskPaths(task, None, None, f"{self._no_provider(task)}; {self._no_server()}")

    def _no_provider(self, task: str) -> str:
        """Why no model of ``task`` runs off the expert servers now (one clause)."""
        if not self.uses_providers:
            return 'providers are not used ([inference] mode = "local")'
        ranked = self.catalog.candidates(task)
        if not ranked:
            return "the catalog has no model for it"
        route = self.provider_route(ranked[0].id)
        if route is None:
            return "no provider, gateway or endpoint is configured"
        if route.kind == "provider" and not client_serves_anywhere(task):
            return ("no Inference Provider helper of the installed huggingface_hub runs it (an endpoint, a gateway or "
                    "an expert server can)")
        if getattr(self.availability, "hub_unreachable", False):
            return "the Hugging Face Hub could not be reached to ask which providers serve its models"
        return f"none of its {len(ranked)} catalog models is served by the configured providers now"

    def _no_server(self) -> str:
        """Why no expert server runs a task now (one clause)."""
        if self.servers is None:
            return "no expert server is configured"
        if self.mode == "providers":
            return 'expert servers are not used ([inference] mode = "providers")'
        if not self.servers.urls:
            return "no expert server is configured or registered now"
        return "the expert servers list no model for it"

    def server_failed(self, url: str) -> None:
        """An expert server refused a connection: its listing is asked again before it is used."""
        if self.servers is not None:
            self.servers.forget(url)

    def unreachable(self) -> list[str]:
        """Expert servers whose last ``GET /models`` failed (empty when none are used)."""
        return self.servers.unreachable() if self.uses_servers and self.servers is not None else []
