"""Prometheus metrics of the bot: runs, the paper's four stages, tasks, expert calls, controller
tokens, cost, runs in flight, event-loop lag, store errors and turns answered without memory.

Every figure is derived from what a turn already carries: :func:`adapters.turn.follow` hands each
turn's end to :class:`TurnMetrics` (its front end, how it ended, its :class:`RunRecord`); the
service counts store errors and degraded turns (:func:`store_error`, :func:`degraded_turn`).
They are exposed on ``/metrics`` of ``hugginggpt serve`` and of the Slack HTTP server
(:func:`exposition`), and on a small port of their own for the Discord and Socket Mode bots
(``[telemetry] metrics_port``, :func:`serve_port`); docs/operations.md says how to read them.

Label values are bounded: each is checked against a fixed set (front ends, outcomes, stages,
Hugging Face pipeline tags of :data:`pipeline.tasks.TASKS`, kinds of place a model runs, the
provider names ``huggingface_hub`` knows) and anything else is counted as ``"other"``. No user
id, conversation id, URL, model id or request text ever becomes a label.

Several processes on one machine (replicas behind a load balancer sharing one scrape target):
set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before they start; each process then
writes its values there and any of them answers for all (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest, make_wsgi_app, multiprocess

from pipeline.experts.providers import client_knows
from pipeline.mcp_tools import PREFIX as MCP_TASKS
from pipeline.tasks import TASKS
from pipeline.types import RunRecord, Selection, TaskResult

from .errors import ConfigError
from .settings import TelemetrySettings

log = logging.getLogger(__name__)

FRONT_ENDS = ("discord", "slack", "http", "mcp", "chat", "run")
"""Front ends as :func:`adapters.turn.follow`'s ``where`` names them (its first word)."""
OUTCOMES = ("answered", "partial", "deadline", "stopped", "failed", "refused", "restarted", "crashed", "elsewhere")
"""How a turn ended (:data:`adapters.turn.Moment`)."""
STAGES = {"planning": "task_planning", "selection": "model_selection", "execution": "task_execution",
          "response": "response_generation", "replanning": "task_replanning"}
"""``RunRecord.timings_ms`` key → ``stage`` label (HuggingGPT §3: planning, selection, execution, response)."""
TASK_OUTCOMES = ("ok", "failed", "skipped")
"""How a task ended (:data:`pipeline.types.TaskStatus`)."""
WHERES = ("local", "provider", "gateway", "endpoint", "controller", "in-process", "mcp")
"""Kinds of place a task runs (the first word of :attr:`pipeline.types.Output.where`)."""
STORE_STEPS = ("open_turn", "save_turn", "claim_delivery", "settle_delivery")
"""The service's calls to the store whose failures are counted."""
OTHER = "other"

SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

RUNS = Counter("hugginggpt_runs", "Turns, by front end and how they ended", ["front_end", "outcome"])
RUN_SECONDS = Histogram("hugginggpt_run_seconds", "Wall time of a run, seconds", ["front_end"], buckets=SECONDS_BUCKETS)
RUN_CPU = Counter("hugginggpt_run_cpu_seconds", "CPU time of this process during runs, seconds", ["front_end"])
STAGE_SECONDS = Histogram("hugginggpt_stage_seconds", "Wall time of a stage of a run, seconds (model selection: "
                          "summed over the run's tasks)", ["stage"], buckets=SECONDS_BUCKETS)
TASKS_DONE = Counter("hugginggpt_tasks", "Tasks of runs, by pipeline tag, where they ran and outcome",
                     ["task", "where", "provider", "outcome"])
EXPERT_SECONDS = Histogram("hugginggpt_expert_call_seconds", "Time from a task's first expert call to its "
                           "answer or last failure, seconds (retries on other models included)",
                           ["where", "provider"], buckets=SECONDS_BUCKETS)
TOKENS = Counter("hugginggpt_controller_tokens", "Controller tokens the server reported", ["direction"])
COST = Counter("hugginggpt_cost_usd", "Cost of runs, the part with known prices, US dollars", ["front_end"])
IN_FLIGHT = Gauge("hugginggpt_runs_in_flight", "Turns being answered now", ["front_end"], multiprocess_mode="livesum")
LOOP_LAG = Gauge("hugginggpt_event_loop_lag_seconds", "Wait of a callback scheduled on the event loop, "
                 "measured at the scrape, seconds", multiprocess_mode="livemax")
STORE_ERRORS = Counter("hugginggpt_store_errors", "Failures of the conversation store, by the service's step", ["step"])
DEGRADED = Counter("hugginggpt_degraded_turns", "Turns answered without memory because the store failed", ["front_end"])


def bounded(value: str | None, allowed: Iterable[str]) -> str:
    """``value`` when it is one of ``allowed``, else ``"other"``: a label value never comes from
    free text.

    Args:
        value: a candidate label value (``None`` counts as other).
        allowed: the label's fixed set of values.

    Returns:
        The label value (``str``).
    """
    return value if value is not None and value in allowed else OTHER


def front_end_of(where: str) -> str:
    """The ``front_end`` label of a turn's place as :func:`adapters.turn.follow` logs it
    (``"slack C1/1700.1"`` → ``"slack"``); ``"other"`` for anything but :data:`FRONT_ENDS`."""
    return bounded(where.split(" ", 1)[0], FRONT_ENDS)


def place_of(result: TaskResult, selection: Selection | None) -> tuple[str, str]:
    """The ``where`` and ``provider`` labels of a task: where its output says it ran, else where
    its selection meant it to (``"provider hf-inference"`` → ``("provider", "hf-inference")``).
    The provider is kept only when ``huggingface_hub`` knows its name; ``""`` for other places."""
    where = (result.output.where if result.output is not None else None) or (selection.where if selection else None)
    if where is None and selection is not None:
        where = {"controller": "controller", "local": "in-process", "mcp": "mcp"}.get(selection.runner)
    kind, _, target = (where or "").partition(" ")
    kind = bounded(kind, WHERES)
    if kind != "provider":
        return kind, ""
    return kind, target if target and client_knows(target) else OTHER


def task_label(tag: str | None) -> str:
    """The ``task`` label of a task: its pipeline tag; ``"mcp"`` for any tool of an MCP tool server
    (their names come from the servers, so they are not labels); ``"other"`` for anything else."""
    if tag is not None and tag.startswith(MCP_TASKS):
        return "mcp"
    return bounded(tag, TASKS)


def observe_record(record: RunRecord, front_end: str) -> None:
    """Count one finished run: its duration and CPU, each stage's duration, each task (pipeline
    tag, where, provider, outcome) and its expert time, the controller's tokens and the cost.

    Args:
        record: the run's record (``Done``); reads ``timings_ms`` (milliseconds), ``tasks``,
            ``selections``, ``results``, ``prompt_tokens``, ``completion_tokens`` and ``cost``.
        front_end: the ``front_end`` label (one of :data:`FRONT_ENDS` or ``"other"``).
    """
    timings = record.timings_ms
    if "total" in timings:
        RUN_SECONDS.labels(front_end).observe(timings["total"] / 1000)
    if "cpu" in timings:
        RUN_CPU.labels(front_end).inc(timings["cpu"] / 1000)
    for key, stage in STAGES.items():
        if key in timings:
            STAGE_SECONDS.labels(stage).observe(timings[key] / 1000)
    tags = {t.id: t.task for t in record.tasks}
    for tid, result in record.results.items():
        where, provider = place_of(result, record.selections.get(tid))
        TASKS_DONE.labels(task_label(tags.get(tid)), where, provider, bounded(result.status, TASK_OUTCOMES)).inc()
        if result.started is not None and result.finished is not None:
            EXPERT_SECONDS.labels(where, provider).observe(max(0.0, result.finished - result.started))
    if record.prompt_tokens:
        TOKENS.labels("input").inc(record.prompt_tokens)
    if record.completion_tokens:
        TOKENS.labels("output").inc(record.completion_tokens)
    if record.cost is not None:
        observe_cost(record.cost.known_usd, front_end)


def observe_cost(usd: float, front_end: str) -> None:
    """Add a run's cost (its record's actual cost, the part with known prices: :mod:`pipeline.cost`).

    Args:
        usd: the cost in US dollars (negative or not finite: ignored).
        front_end: the turn's front end (bounded by :data:`FRONT_ENDS`).
    """
    if usd > 0 and usd != float("inf"):
        COST.labels(bounded(front_end, FRONT_ENDS)).inc(usd)


def store_error(step: str) -> None:
    """Count one failure of the conversation store at the service's ``step`` (one of :data:`STORE_STEPS`)."""
    STORE_ERRORS.labels(bounded(step, STORE_STEPS)).inc()


def degraded_turn(platform: str) -> None:
    """Count one turn answered without memory (:mod:`bot.degraded`); ``platform`` is the
    conversation key's (``"discord"``, ``"slack"``, ``"terminal"`` is counted as ``"chat"``)."""
    DEGRADED.labels(bounded("chat" if platform == "terminal" else platform, FRONT_ENDS)).inc()


class TurnMetrics:
    """One turn followed by :func:`adapters.turn.follow`: in flight from construction until
    :meth:`ended` or :meth:`close`.

    Args:
        where: the turn's place as ``follow`` names it (its first word is the front end).
    """

    def __init__(self, where: str) -> None:
        self.front_end = front_end_of(where)
        self._open = True
        IN_FLIGHT.labels(self.front_end).inc()

    def ended(self, outcome: str, record: RunRecord | None) -> None:
        """The turn ended as ``outcome`` (an :data:`OUTCOMES` value) with ``record`` (``None``
        when it ended before ``Done``): counted once, the record observed."""
        if not self._open:
            return
        self.close()
        RUNS.labels(self.front_end, bounded(outcome, OUTCOMES)).inc()
        if record is not None:
            observe_record(record, self.front_end)

    def close(self) -> None:
        """No longer in flight (idempotent)."""
        if self._open:
            self._open = False
            IN_FLIGHT.labels(self.front_end).dec()


def registry() -> CollectorRegistry:
    """The registry to expose: the process's own, or, with ``PROMETHEUS_MULTIPROC_DIR`` set,
    one that reads every process's values from that directory."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    shared = CollectorRegistry()
    multiprocess.MultiProcessCollector(shared)
    return shared


def process_ended() -> None:
    """In multiprocess mode, drop this process's live gauges (runs in flight, loop lag) from the
    shared directory as it stops; nothing otherwise."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(os.getpid())


async def exposition() -> tuple[bytes, str]:
    """The text exposition for a ``/metrics`` route served on the event loop, with the loop lag
    measured now (the time one ``asyncio.sleep(0)`` takes to come back).

    Returns:
        ``(body, content type)``.
    """
    started = time.monotonic()
    await asyncio.sleep(0)
    LOOP_LAG.set(time.monotonic() - started)
    return generate_latest(registry()), CONTENT_TYPE_LATEST


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Scrapes are not logged."""


def serve_port(host: str, port: int, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Serve ``/metrics`` on ``host:port`` from a thread (the Discord and Socket Mode bots, which
    have no HTTP server of their own); each scrape measures ``loop``'s lag.

    Args:
        host: address to bind. port: TCP port (0: any free one; the log line names it).
        loop: the bot's event loop.

    Returns:
        A function that stops the server.

    Raises:
        OSError: the port cannot be opened.
    """
    app = make_wsgi_app(registry())

    def measured(environ: dict[str, Any], start_response: Any) -> Any:
        LOOP_LAG.set(_lag_of(loop))
        return app(environ, start_response)

    server: WSGIServer = make_server(host, port, measured, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    log.info("serving Prometheus metrics on http://%s:%d/metrics", host, server.server_port)

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return stop


@contextlib.contextmanager
def metrics_port(telemetry: TelemetrySettings) -> Iterator[None]:
    """While inside, serve ``/metrics`` on ``[telemetry] metrics_host:metrics_port`` (nothing when
    the port is unset); call it from the bot's event loop.

    Raises:
        ConfigError: the port cannot be opened (in use, not allowed).
    """
    host, port = telemetry.metrics_host, telemetry.metrics_port
    if port is None:
        yield
        return
    try:
        stop = serve_port(host, port, asyncio.get_running_loop())
    except OSError as e:
        raise ConfigError(f"I cannot serve metrics on {host}:{port} ({e.strerror or e.__class__.__name__}); "
                          "choose another [telemetry] metrics_port.") from None
    try:
        yield
    finally:
        stop()


def _lag_of(loop: asyncio.AbstractEventLoop, timeout: float = 5.0) -> float:
    """Seconds until a callback scheduled on ``loop`` from another thread runs (``timeout`` at most)."""
    ran = threading.Event()
    started = time.monotonic()
    try:
        loop.call_soon_threadsafe(ran.set)
    except RuntimeError:  # the loop is closed
        return 0.0
    ran.wait(timeout)
    return time.monotonic() - started
