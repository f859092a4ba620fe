"""Traces of runs: OpenTelemetry spans, exported over OTLP/HTTP when an endpoint is set.

One trace per turn (docs/operations.md)::

    turn                                 front end, status
    ├── task planning                    tasks planned
    ├── task execution                   one per round of tasks
    │   └── task                         id, pipeline tag, model, runner, where it ran, outcome
    │       ├── model selection          the model chosen, candidates
    │       └── expert call              one per model tried; W3C ``traceparent`` on its HTTP requests
    │           └── (the expert server's own spans: request, queueing, inference)
    ├── task replanning                  when a round left a task failed
    └── response generation

Off unless :func:`install` is given an endpoint (``[telemetry] otlp_endpoint`` or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``): then, and only then, the OpenTelemetry SDK and its OTLP/HTTP
exporter are imported and a ``TracerProvider`` with a ``BatchSpanProcessor`` is installed (the
export runs in the SDK's own thread). Off, every function here returns at its first line: nothing
of OpenTelemetry is imported, no span object is made, no header is added.

Spans carry ids, names, models, places and outcomes, never the request's text, a file's content,
an error's sentence (it may quote the request) or a secret; only ``[telemetry] trace_content`` puts
the request's text on the turn's span (:func:`content`). A span is made current with
:func:`span`, which is safe in an async generator: on exit it sets the context it found back by
value (a generator may be closed from another task, where resetting a context variable's token
fails), and it records only the class of an exception that passes through it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

ATTRIBUTE = "hugginggpt."
"""Prefix of this program's span attributes (``hugginggpt.task.id``...)."""
CONTENT_CHARS = 4096
"""Characters of the request's text put on the turn's span with ``[telemetry] trace_content``."""
EXIT_WAIT = 3.0
"""Seconds the program waits at its exit for the spans still waiting to reach the collector; past
that (a collector down or hanging) they are dropped, with one log line, and the program ends."""
TRACES_PATH = "/v1/traces"
"""Path of the traces endpoint under an OTLP/HTTP collector's base URL (the OTLP specification)."""

_tracer: Any = None
_provider: Any = None
_content = False
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext(None)


def enabled() -> bool:
    """Whether spans are made and exported (:func:`install` was given an endpoint)."""
    return _tracer is not None


def install(endpoint: str | None, *, service: str, trace_content: bool = False) -> bool:
    """Export this process's spans to the OTLP/HTTP collector at ``endpoint`` from now on.

    Args:
        endpoint: the collector's base URL (``http://127.0.0.1:4318``; spans go to
            ``{endpoint}/v1/traces``), or ``None``: nothing is imported or installed.
        service: the ``service.name`` resource attribute (``"hugginggpt"``).
        trace_content: put the request's text on the turn's span (:func:`content`).

    Returns:
        Whether tracing is on. A second call keeps the first provider (OpenTelemetry allows one
        per process).
    """
    global _tracer, _provider, _content
    if not endpoint:
        return enabled()
    if _tracer is not None:
        return True
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + TRACES_PATH)))
    trace.set_tracer_provider(provider)
    _provider, _content = provider, trace_content
    _tracer = provider.get_tracer("hugginggpt")
    logging.setLogRecordFactory(_with_trace_id(logging.getLogRecordFactory()))
    log.info("traces go to %s%s", endpoint.rstrip("/"), TRACES_PATH)
    return True


def shutdown(wait: float = EXIT_WAIT) -> None:
    """Send the spans still waiting and stop the exporter (at the program's exit), waiting at most
    ``wait`` seconds (the exporter's own retries would wait up to its timeout, 10 s by default, per
    batch); no-op when off."""
    global _tracer
    if _provider is None or _tracer is None:
        return
    _tracer = None
    sender = threading.Thread(target=_provider.shutdown, name="trace-export-at-exit", daemon=True)
    sender.start()
    sender.join(wait)
    if sender.is_alive():
        log.warning("the last spans did not reach the trace collector within %g s; they are dropped", wait)


def _with_trace_id(factory: Any) -> Any:
    """A log record factory adding ``trace_id`` (32 hex digits) and ``trace`` (``" trace_id=…"``,
    what the log format prints after the logger's name) to records made while a span is current."""
    from opentelemetry import trace

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = f"{ctx.trace_id:032x}"
            record.trace = f" trace_id={record.trace_id}"
        return record

    return make


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` under :data:`ATTRIBUTE`, ``None`` values left out (OpenTelemetry refuses them)."""
    return {ATTRIBUTE + k: v for k, v in values.items() if v is not None}


def start(name: str, attributes: Mapping[str, Any] | None = None, *, parent: Any = None) -> Any:
    """A started span that is not made current (end it with :func:`end`), child of ``parent`` (a
    span) or else of the current span; ``None`` when tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.set_span_in_context(parent) if parent is not None else None
    return _tracer.start_span(name, context=context, attributes=_attributes(attributes or {}))


def end(span: Any, attributes: Mapping[str, Any] | None = None) -> None:
    """Set ``attributes`` on ``span`` and end it (``None``: nothing)."""
    if span is not None:
        annotate(span, attributes or {})
        span.end()


def annotate(span: Any, attributes: Mapping[str, Any]) -> None:
    """Set ``attributes`` (names without the prefix) on ``span``; ``None`` span: nothing."""
    if span is not None:
        span.set_attributes(_attributes(attributes))


def failed(span: Any, error: BaseException) -> None:
    """Mark ``span`` as failed, with the class of ``error`` only (its text may quote the request)."""
    if span is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, type(error).__name__))


def span(name: str, attributes: Mapping[str, Any] | None = None, *, parent: Any = None
         ) -> contextlib.AbstractContextManager[Any]:
    """A span current for the block, child of ``parent`` (a span) or else of the current span;
    the block gets the span (``None`` when tracing is off). An exception leaving the block marks
    it failed with its class (:func:`failed`); cancellation is not a failure."""
    if _tracer is None:
        return _NO_SPAN
    return _current(start(name, attributes, parent=parent))


@contextlib.contextmanager
def _current(opened: Any) -> Iterator[Any]:
    from opentelemetry import context, trace

    found = context.get_current()
    context.attach(trace.set_span_in_context(opened, found))
    try:
        yield opened
    except Exception as e:
        failed(opened, e)
        raise
    finally:
        opened.end()
        context.attach(found)  # by value, not by token: right in whichever task a generator ends


def current() -> Any:
    """The current span (to parent spans made later, from another task), or ``None`` when off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    return trace.get_current_span()


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's W3C ``traceparent`` (and ``tracestate``) to an outgoing request's
    ``headers`` (the W3C Trace Context recommendation, through OpenTelemetry's propagator)."""
    if _tracer is not None:
        from opentelemetry import propagate

        propagate.inject(headers)


def content(text: str) -> dict[str, Any]:
    """``{"request.text": text}`` (cut to :data:`CONTENT_CHARS`) with ``[telemetry] trace_content``,
    else ``{}``: to merge into the turn span's attributes."""
    return {"request.text": text[:CONTENT_CHARS]} if _content else {}


def traced(name: str, job: Coroutine[Any, Any, T], attributes: Mapping[str, Any] | None = None
           ) -> Coroutine[Any, Any, T]:
    """``job`` run inside a span current for it (give it to ``asyncio.create_task``: the span is then
    the task's own); ``job`` itself when tracing is off."""
    if _tracer is None:
        return job
    return _in_span(name, job, attributes)


async def _in_span(name: str, job: Coroutine[Any, Any, T], attributes: Mapping[str, Any] | None) -> T:
    with span(name, attributes):
        return await job


def spanned(name: str, events: AsyncIterator[T]) -> AsyncIterator[T]:
    """``events`` (an async generator, closed with the result) inside a span current while it runs;
    ``events`` itself when tracing is off."""
    if _tracer is None:
        return events
    return _spanned(name, events)


async def _spanned(name: str, events: AsyncIterator[T]) -> AsyncIterator[T]:
    with span(name):
        async with contextlib.aclosing(events) as inner:  # type: ignore[type-var]
            async for event in inner:
                yield event
