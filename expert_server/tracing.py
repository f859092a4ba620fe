"""Traces of the expert server's requests: each model request continues its caller's trace.

The bot sends the W3C ``traceparent`` of its ``expert call`` span with each request (W3C Trace
Context recommendation); with ``otlp_endpoint`` set (or ``OTEL_EXPORTER_OTLP_ENDPOINT``), the
server extracts it and adds, below that span::

    POST /models/{model_id}      model id, task, status code (reading and decoding the input inside)
    ├── queueing                 from the queue to the start of its batch (the model's load included)
    └── inference                the batch's run on the device; batch size

exported over OTLP/HTTP by the OpenTelemetry SDK (a ``BatchSpanProcessor``: its own thread). Off
(the default) nothing of OpenTelemetry is imported and every function returns at its first line.
Spans hold ids, the model, the task, sizes and status codes, never an input or an output.

The server stands alone (it imports nothing of the bot), so this is its own small copy of what
:mod:`pipeline.tracing` does for the bot.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

log = logging.getLogger("expert_server")

SERVICE = "hugginggpt-expert-server"
"""The ``service.name`` of the server's spans."""
EXIT_WAIT = 3.0
"""Seconds the server waits at exit for the spans still waiting to reach the collector."""
TRACES_PATH = "/v1/traces"
"""Path of the traces endpoint under an OTLP/HTTP collector's base URL (the OTLP specification)."""

_tracer: Any = None
_provider: Any = None


def install(endpoint: str | None) -> bool:
    """Export this process's spans to the OTLP/HTTP collector at ``endpoint`` (its base URL) from
    now on; ``None``: nothing is imported or installed. Returns whether tracing is on (a second call
    keeps the first provider)."""
    global _tracer, _provider
    if not endpoint or _tracer is not None:
        return _tracer is not None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + TRACES_PATH)))
    trace.set_tracer_provider(provider)
    _provider, _tracer = provider, provider.get_tracer("expert_server")
    log.info("traces go to %s%s", endpoint.rstrip("/"), TRACES_PATH)
    return True


def shutdown(wait: float = EXIT_WAIT) -> None:
    """Send the spans still waiting and stop the exporter (at exit), waiting at most ``wait``
    seconds (a collector down or hanging: they are dropped, one log line); no-op when off."""
    global _tracer
    if _provider is None or _tracer is None:
        return
    _tracer = None
    sender = threading.Thread(target=_provider.shutdown, name="trace-export-at-exit", daemon=True)
    sender.start()
    sender.join(wait)
    if sender.is_alive():
        log.warning("the last spans did not reach the trace collector within %g s; they are dropped", wait)


@contextlib.contextmanager
def request_span(headers: Mapping[str, str], model_id: str, task: str) -> Iterator[Any]:
    """The span of one model request, current for the block, continuing the trace whose
    ``traceparent`` ``headers`` carry (a new trace without one). An error with an HTTP ``status``
    (:class:`expert_server.errors.ExpertError`) leaving the block is recorded as that status code
    and its class, never its text. Yields ``None`` when tracing is off."""
    if _tracer is None:
        yield None
        return
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind, Status, StatusCode

    attributes = {"http.request.method": "POST", "http.route": "/models/{model_id}", "hugginggpt.model.id": model_id,
                  "hugginggpt.task.tag": task}
    with _tracer.start_as_current_span("POST /models/{model_id}", context=propagate.extract(headers),
                                       kind=SpanKind.SERVER, attributes=attributes, record_exception=False,
                                       set_status_on_exception=False) as span:
        try:
            yield span
        except Exception as e:
            status = getattr(e, "status", 500)
            span.set_attribute("http.response.status_code", status)
            span.set_attribute("error.type", type(e).__name__)
            span.set_status(Status(StatusCode.ERROR, type(e).__name__))
            raise
        span.set_attribute("http.response.status_code", 200)


def current() -> Any:
    """The current context (to parent the queueing and inference spans of a job), ``None`` when off."""
    if _tracer is None:
        return None
    from opentelemetry import context

    return context.get_current()


def now() -> int:
    """Nanoseconds since the epoch, the clock of span times (``0`` when tracing is off: not read)."""
    return time.time_ns() if _tracer is not None else 0


def record_batch(contexts: Iterable[tuple[Any, int]], began: int, ended: int, model_id: str, size: int) -> None:
    """Add a ``queueing`` span (``queued`` → ``began``) and an ``inference`` span (``began`` →
    ``ended``) below each request of one batch.

    Args:
        contexts: ``(context from :func:`current`, nanoseconds when it was queued)`` per request;
            a ``None`` context is skipped.
        began, ended: nanoseconds (:func:`now`) when the batch's run began and ended.
        model_id: the model. size: the requests in the batch.
    """
    if _tracer is None:
        return
    attributes = {"hugginggpt.model.id": model_id, "hugginggpt.batch.size": size}
    for context, queued in contexts:
        if context is None:
            continue
        _tracer.start_span("queueing", context=context, start_time=queued, attributes=attributes).end(end_time=began)
        _tracer.start_span("inference", context=context, start_time=began, attributes=attributes).end(end_time=ended)
