"""A stand-in OpenTelemetry collector: the OTLP/HTTP traces endpoint (``POST /v1/traces``) on
127.0.0.1, decoding the real protobuf payloads (``ExportTraceServiceRequest`` of
``opentelemetry-proto``) the SDK's exporter sends, for the tests and the traces benchmark.

It runs in a thread of its own (its own event loop), so a test can start programs in
subprocesses against it and read what they sent::

    with OtlpReceiver() as receiver:
        run(env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
        spans = receiver.wait_for(lambda spans: any(s.name == "turn" for s in spans))
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sandbox import serve_loopback


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector got it: ids as hex, attributes and events' attributes as plain values."""

    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 0
    status_message: str = ""
    start_ns: int = 0
    end_ns: int = 0


def _value(v: Any) -> Any:
    """A plain Python value of an OTLP ``AnyValue``."""
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest`` (protobuf bytes).

    Raises:
        google.protobuf.message.DecodeError: the body is not such a message.
    """
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(ReceivedSpan(
                    service=str(resource.get("service.name", "")), trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                    parent_id=s.parent_span_id.hex(), name=s.name, kind=s.kind,
                    attributes={kv.key: _value(kv.value) for kv in s.attributes},
                    events=[(e.name, {kv.key: _value(kv.value) for kv in e.attributes}) for e in s.events],
                    status=s.status.code, status_message=s.status.message,
                    start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano))
    return out


class OtlpReceiver:
    """The OTLP/HTTP traces endpoint in a thread; ``url`` is its base URL (what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes), ``spans`` what it decoded, ``posts`` how many exports came."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self.url = ""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="otlp-receiver", daemon=True)
        self._runner: Any = None

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        spans = decode(body)
        with self._lock:
            self.posts += 1
            self.spans.extend(spans)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    async def _start(self) -> int:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/traces", self._traces)
        self._runner, port = await serve_loopback(app)
        return port

    def start(self) -> OtlpReceiver:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def snapshot(self) -> list[ReceivedSpan]:
        """The spans received so far."""
        with self._lock:
            return list(self.spans)

    def wait_for(self, ready: Callable[[list[ReceivedSpan]], bool], timeout: float = 30) -> list[ReceivedSpan]:
        """The spans received, once ``ready(spans)`` holds.

        Raises:
            TimeoutError: it did not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.snapshot()
            if ready(spans):
                return spans
            time.sleep(0.05)
        raise TimeoutError(f"{len(self.snapshot())} spans received, not the ones awaited")

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
