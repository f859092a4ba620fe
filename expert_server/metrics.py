"""Prometheus metrics of the expert server, read at each scrape from what the server already keeps
(the figures of ``GET /models``): models by state, memory used by models and by inputs against the
budget, loads and evictions, requests waiting per model, and the batches each model ran.

Labels are the server's own model ids (those of its cache and ``[local_models]``, a set the
operator chose) and fixed states; nothing a caller sends becomes a label. Served as
``GET /metrics`` by :func:`expert_server.app.create_app`; docs/operations.md says how to read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

STATES = ("loaded", "on_disk", "refused")
"""What :meth:`expert_server.pool.Pool.state` says of a model."""


class PoolCollector(Collector):
    """Reads one server's state at each scrape.

    Args:
        state: a function returning the server's :class:`expert_server.app.State` (read lazily:
            the pool exists only once the cache is scanned).
    """

    def __init__(self, state: Callable[[], Any]) -> None:
        self._state = state

    def collect(self) -> Iterator[Any]:
        """The metric families (none but ``up``-like readiness before the cache is read)."""
        state = self._state()
        ready = GaugeMetricFamily("hugginggpt_experts_ready", "1 once the model cache is read")
        ready.add_metric([], 1.0 if state.ready else 0.0)
        yield ready
        pool = state.pool
        if pool is None:
            return
        yield from _memory(state, pool)
        yield from _models(state, pool)
        yield from _queues(state)


def _memory(state: Any, pool: Any) -> Iterator[Any]:
    used = GaugeMetricFamily("hugginggpt_experts_memory_used_bytes", "Bytes charged to the budget, by what holds them",
                             labels=["holder"])
    used.add_metric(["models"], float(pool.used))
    used.add_metric(["inputs"], float(pool.inputs))
    yield used
    if state.budget is not None:
        yield GaugeMetricFamily("hugginggpt_experts_memory_budget_bytes", "The memory budget, bytes", value=state.budget)
    yield CounterMetricFamily("hugginggpt_experts_evictions", "Models unloaded to make room under the budget",
                              value=pool.evictions)


def _models(state: Any, pool: Any) -> Iterator[Any]:
    counts = dict.fromkeys(STATES, 0)
    loads = CounterMetricFamily("hugginggpt_experts_model_loads", "Loads of a model into memory", labels=["model"])
    for model_id, slot in sorted(pool.slots.items()):
        counts[pool.state(model_id)] = counts.get(pool.state(model_id), 0) + 1
        loads.add_metric([model_id], slot.loads)
    models = GaugeMetricFamily("hugginggpt_experts_models", "Models the server can serve, by state", labels=["state"])
    for name, n in counts.items():
        models.add_metric([name], n)
    yield models
    yield loads


def _queues(state: Any) -> Iterator[Any]:
    waiting = GaugeMetricFamily("hugginggpt_experts_queue_length", "Requests waiting for a model", labels=["model"])
    runs = CounterMetricFamily("hugginggpt_experts_batches", "Calls of a model on a batch", labels=["model"])
    items = CounterMetricFamily("hugginggpt_experts_batch_items", "Requests in those batches", labels=["model"])
    largest = GaugeMetricFamily("hugginggpt_experts_batch_largest", "Items of the largest batch so far", labels=["model"])
    retried = CounterMetricFamily("hugginggpt_experts_batches_retried", "Batches whose call raised and were run again "
                                  "one by one", labels=["model"])
    for model_id, q in sorted(state.queues.items()):
        waiting.add_metric([model_id], q.queue.qsize())
        runs.add_metric([model_id], q.stats.runs)
        items.add_metric([model_id], q.stats.items)
        largest.add_metric([model_id], q.stats.largest)
        retried.add_metric([model_id], q.stats.retried)
    yield from (waiting, runs, items, largest, retried)


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """``(body, content type)`` of ``registry`` in the Prometheus text format."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def registry_for(state: Callable[[], Any]) -> CollectorRegistry:
    """A registry of its own for one app (tests run several in a process), with the pool's
    collector and the process's CPU and memory (prometheus_client's process collector)."""
    from prometheus_client import ProcessCollector

    registry = CollectorRegistry()
    registry.register(PoolCollector(state))
    ProcessCollector(registry=registry)
    return registry
