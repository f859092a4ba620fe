"""Routing one model across the places it runs: the team's expert servers first, then a provider
(the hybrid inference endpoint of HuggingGPT §3.3: local models preferred, hosted ones after).

For model ``M`` of task ``T`` the routes are, in order (:class:`pipeline.catalog.placement.Placement`):

1. every expert server that lists ``M`` for ``T`` as ``loaded`` or ``on_disk``, in the order of
   ``[inference] experts_url`` (``{url}/models/{M}``, the Hugging Face wire format);
2. then, unless ``mode = "local"``, ``M``'s own routes off the servers (dedicated endpoint,
   gateway, or each Inference Provider serving ``M`` now, in the provider policy's order: the
   chain moves across providers before the executor moves to another model).

A route that fails with an error another place may not have (the server is down, lacks the model,
is loading, overloaded, timed out, answered 5xx or unreadable output) hands over to the next
route; one that fails because of the request itself (a refused payload, a reply over a size
limit) ends the model's turn at once. An account out of credits (``reason="billing"``) ends the
whole task at once: no other provider or model would be paid by another account. When every route failed, the last error is raised, and the
executor moves on to the next candidate (:mod:`pipeline.execution`), local or not.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..catalog.placement import Placement, Route
from ..errors import ExpertError
from ..llm import Usage
from ..types import Output, ResourceSink
from .hub import HubRunner, refused_connection

log = logging.getLogger(__name__)

NEXT_ROUTE_REASONS = frozenset({"gone", "loading", "rate_limited", "server", "timeout", "bad_output", "unavailable"})
"""``ExpertError.reason`` values after which the same model is tried at its next route."""


class RoutingRunner:
    """:class:`pipeline.experts.base.ExpertRunner` for Hugging Face models across expert servers
    and providers.

    Args:
        hub: the runner that makes the calls (one ``AsyncInferenceClient``).
        placement: where each model runs (:class:`pipeline.catalog.placement.Placement`).

    Example::

        runner = RoutingRunner(hub, Placement(catalog, availability, ExpertServers(["http://gpu1:8081"], ttl=10, timeout=3)))
        out = await runner.run("depth-estimation", "Intel/dpt-large", {"image": photo}, sink, task_id=1)
        out.where   # "local http://gpu1:8081"
    """

    def __init__(self, hub: HubRunner, placement: Placement) -> None:
        self.hub = hub
        self.placement = placement

    async def routes(self, task: str, model: str) -> list[Route]:
        """The expert servers listing ``model`` now; the provider route is added lazily by
        :meth:`run` (its Hub look-up is only made when the servers failed)."""
        return await self.placement.local_routes(task, model)

    async def run(
        self, task: str, model: str, args: dict[str, Any], sink: ResourceSink, *, task_id: int, usage: Usage | None = None
    ) -> Output:
        """Run ``task`` on ``model`` at the first route that answers.

        Returns:
            The normalised :class:`Output` with ``where`` set to the route that produced it
            (``"local http://…"``, ``"provider hf-inference"``, ``"gateway …"``, ``"endpoint …"``).

        Raises:
            ExpertError: every route failed (the last route's error; for an expert server, the
                sentence names it), or no route serves ``model`` (``reason="unavailable"``).
            HuggingGPTError: the sink's error, unchanged (:meth:`HubRunner.run`).
        """
        local = await self.routes(task, model)
        last: ExpertError | None = None
        for route in local:
            try:
                return await self._run_at(route, task, model, args, sink, task_id)
            except ExpertError as e:
                last = _at_server(e, route)
                if refused_connection(e):
                    self.placement.server_failed(route.target)
                if e.reason not in NEXT_ROUTE_REASONS:
                    raise last from e
                log.warning("task %s (%s): %s failed at %s (%s); trying its next route", task_id, task, model,
                            route.label, e.reason)
        remote = await self._provider_routes(task, model, bool(local))
        if not remote:
            raise last or self._no_route(task, model)
        if local:
            log.info("task %s (%s): %s falls back from the expert servers to %s", task_id, task, model, remote[0].label)
        for n, route in enumerate(remote):
            try:
                return await self._run_at(route, task, model, args, sink, task_id)
            except ExpertError as e:
                if e.reason not in NEXT_ROUTE_REASONS or n == len(remote) - 1:
                    raise
                log.warning("task %s (%s): %s failed at %s (%s); trying %s", task_id, task, model, route.label,
                            e.reason, remote[n + 1].label)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _provider_routes(self, task: str, model: str, had_local: bool) -> list[Route]:
        if not self.placement.uses_providers:
            return []
        if had_local:  # listed by a server: a provider serves it only if it is live there
            return await self.placement.provider_fallbacks(task, model)
        # a provider candidate (selection checked it): its routes in the policy's order
        routes = self.placement.provider_routes(task, model)
        if routes:
            return routes
        if getattr(self.placement.availability, "policy", None) is None:  # no policy: the client's default
            return [Route("provider", "auto")]
        return await self.placement.provider_fallbacks(task, model)  # not looked up yet: look it up now

    async def _run_at(self, route: Route, task: str, model: str, args: dict[str, Any], sink: ResourceSink,
                      task_id: int) -> Output:
        url = route.url_for(model)
        provider = route.target if route.kind == "provider" else None
        began = time.monotonic()
        out = await self.hub.run(task, model, args, sink, task_id=task_id, url=url, expert_server=url is not None,
                                 provider=provider)
        policy = getattr(self.placement.availability, "policy", None)
        if provider is not None and policy is not None:
            policy.latency.note(provider, time.monotonic() - began)
        out.where = route.label
        return out

    def _no_route(self, task: str, model: str) -> ExpertError:
        if self.placement.mode == "local":
            down = self.placement.unreachable()
            if down:
                return ExpertError(f"The model {model} cannot run: the expert server {' and '.join(down)} could not "
                                   "be reached.", reason="unavailable")
            return ExpertError(f"No expert server lists the model {model} for {task} any more.", reason="unavailable")
        return ExpertError(f"No configured provider serves {task} with {model}.", reason="unavailable")


def _at_server(err: ExpertError, route: Route) -> ExpertError:
    """``err`` with the expert server named in its sentence (one sentence still)."""
    if route.kind != "local":
        return err
    sentence = err.user_message.rstrip(".")
    return ExpertError(f"{sentence} on the expert server {route.target}.", str(err), reason=err.reason,
                       retryable=err.retryable, estimated_time=err.estimated_time)
