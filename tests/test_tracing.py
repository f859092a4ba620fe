"""OpenTelemetry traces of a run (``[telemetry] otlp_endpoint``, :mod:`pipeline.tracing` and
:mod:`expert_server.tracing`), checked from what a stand-in OTLP/HTTP collector on 127.0.0.1
received and decoded (the real protobuf payloads, :mod:`benchmarks.harness.otlp`).

The real program (``hugginggpt run --sandbox --json``, the sandbox's controller) runs one turn in
hybrid mode against the real expert server (``python -m expert_server`` on tiny random
checkpoints): the trace must be one tree, turn → stages → task → expert call, continued inside the
expert server, with no span holding the request's text; off, nothing of OpenTelemetry is even
imported."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness.otlp import OtlpReceiver, ReceivedSpan
from benchmarks.harness.realparts import free_port, wait_ready
from bot.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT / "tests" / "fixtures" / "media" / "chelsea.png"
REQUEST = "Estimate the depth of this photo, my secret garden zebra"
SERVER_KIND = 2  # SPAN_KIND_SERVER in the OTLP protobuf


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "OTEL_"))}
    return {**env, **extra}


def start_expert_server(cache: Path, tmp: Path, endpoint: str) -> tuple[subprocess.Popen, str]:
    """``python -m expert_server`` on a free port, exporting its spans to ``endpoint`` every 0.2 s."""
    port = free_port()
    env = clean_env(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
                    TOKENIZERS_PARALLELISM="false", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="200")
    proc = subprocess.Popen([sys.executable, "-m", "expert_server", "--port", str(port), "--device", "cpu"], cwd=ROOT,
                            env=env, stdout=open(tmp / "server.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 180, lambda: (tmp / "server.log").read_text(errors="replace"))
    except AssertionError:
        proc.kill()
        raise
    return proc, url


def run_turn(tmp: Path, experts_url: str, env: dict[str, str]) -> dict:
    """``hugginggpt run --sandbox --json REQUEST --file chelsea.png`` in hybrid mode; its document."""
    catalog = tmp / "catalog.jsonl"
    catalog.write_text(json.dumps({"id": "microsoft/resnet-50", "task": "image-classification", "downloads": 5000,
                                   "likes": 10, "description": "Image classification.", "providers": None,
                                   "tags": []}) + "\n")
    config = tmp / "hugginggpt.toml"
    config.write_text(f'[catalog]\npath = "{catalog}"\n\n[inference]\nmode = "hybrid"\nexperts_url = "{experts_url}"\n')
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "--config", str(config), "run", "--sandbox", "--json",
                        REQUEST, "--file", str(PHOTO)], cwd=tmp, env={**env, "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp / "data")},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout)


def children(spans: list[ReceivedSpan], parent: ReceivedSpan, name: str | None = None) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_id == parent.span_id and (name is None or s.name == name)]


def values(span: ReceivedSpan) -> list[str]:
    """Every attribute and event value of ``span``, as text."""
    out = [str(v) for v in span.attributes.values()]
    out += [str(v) for _, attrs in span.events for v in attrs.values()] + [span.name, span.status_message]
    return out


@pytest.fixture(scope="module")
def depth_cache(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from benchmarks.harness import tinymodels

    cache = tmp_path_factory.mktemp("hf-cache")
    tinymodels.build_cache(cache, {"tiny/dpt-depth": tinymodels.REPOS["tiny/dpt-depth"]})
    return cache


@pytest.mark.slow
def test_a_turn_is_one_trace_from_the_front_end_into_the_expert_server(depth_cache, tmp_path):
    with OtlpReceiver() as receiver:
        server, url = start_expert_server(depth_cache, tmp_path, receiver.url)
        try:
            doc = run_turn(tmp_path, url, clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url))
            spans = receiver.wait_for(lambda got: {"turn", "inference"} <= {s.name for s in got})
        finally:
            server.terminate()
            server.wait(10)
    [task] = doc["tasks"]
    assert doc["results"][str(task["id"])]["where"] == f"local {url}"
    [turn] = [s for s in spans if s.name == "turn"]
    assert turn.parent_id == "" and turn.service == "hugginggpt"
    assert turn.attributes["hugginggpt.front_end"] == "terminal" and turn.attributes["hugginggpt.status"] == "ok"
    assert sorted((s.service, s.name) for s in spans if s.trace_id != turn.trace_id) == []  # one trace
    stages = {s.name for s in children(spans, turn)}
    assert {"task planning", "task execution", "response generation"} <= stages
    [execution] = [s for s in children(spans, turn, "task execution") if not s.attributes.get("hugginggpt.discarded")]
    [task_span] = children(spans, execution, "task")
    assert {k: task_span.attributes[f"hugginggpt.{k}"] for k in ("task.id", "task.tag", "model.id", "where", "outcome")} == {
        "task.id": task["id"], "task.tag": "depth-estimation", "model.id": "tiny/dpt-depth", "where": "expert server",
        "outcome": "ok"}
    [selection] = children(spans, task_span, "model selection")
    assert selection.attributes["hugginggpt.model.id"] == "tiny/dpt-depth"
    [call] = children(spans, task_span, "expert call")
    assert call.attributes["hugginggpt.where.target"] == url
    # the expert server continued the trace under the expert call (its traceparent)
    [request] = children(spans, call)
    assert (request.service, request.kind, request.name) == ("hugginggpt-expert-server", SERVER_KIND, "POST /models/{model_id}")
    assert request.attributes["hugginggpt.model.id"] == "tiny/dpt-depth"
    assert request.attributes["http.response.status_code"] == 200
    [queueing] = children(spans, request, "queueing")
    [inference] = children(spans, request, "inference")
    assert queueing.end_ns <= inference.start_ns <= inference.end_ns <= request.end_ns
    # no span holds the request's text, nor any part of it that is not a word of the span names
    text = [v for s in spans for v in values(s)]
    assert not [v for v in text if "secret garden" in v or "zebra" in v or REQUEST in v]
    # the log lines of the run name its trace
    log = (tmp_path / "data" / "logs" / "hugginggpt.log").read_text()
    assert f"trace_id={turn.trace_id}" in log


@pytest.mark.slow
def test_the_request_text_is_on_the_turn_only_when_a_setting_says_so(tmp_path):
    with OtlpReceiver() as receiver:
        env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, HUGGINGGPT_TELEMETRY__TRACE_CONTENT="true",
                        HUGGINGGPT_STORAGE__DATA_DIR=str(tmp_path / "data"))
        p = subprocess.run([sys.executable, "-m", "hugginggpt", "run", "--sandbox", "--json", REQUEST, "--file",
                            str(PHOTO)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 6), p.stderr[-3000:]
        spans = receiver.wait_for(lambda got: any(s.name == "turn" for s in got))
    [turn] = [s for s in spans if s.name == "turn"]
    assert turn.attributes["hugginggpt.request.text"] == REQUEST
    assert not [s.name for s in spans if s is not turn and any("zebra" in v for v in values(s))]


def test_off_nothing_of_opentelemetry_is_loaded(tmp_path):
    """Without an endpoint, a whole sandbox run imports no OpenTelemetry module: no SDK, no
    provider (the API's proxy is all a caller finds), no exporter, and so no ``traceparent`` can
    be added to a request nor a span sent."""
    script = f"""
import json, sys
from hugginggpt import main
status = main(["run", "--sandbox", "--json", {REQUEST!r}, "--file", {str(PHOTO)!r}])
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
from opentelemetry import trace
print(json.dumps({{"status": status, "loaded": loaded, "provider": type(trace.get_tracer_provider()).__name__}}))
"""
    env = clean_env(HUGGINGGPT_STORAGE__DATA_DIR=str(tmp_path / "data"))
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"status": got["status"], "loaded": [], "provider": "ProxyTracerProvider"} and got["status"] in (0, 6)


def test_the_standard_variable_sets_the_endpoint_and_the_setting_wins():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}
    assert load_settings(env=env).telemetry.otlp_endpoint == "http://127.0.0.1:4318"
    mine = {**env, "HUGGINGGPT_TELEMETRY__OTLP_ENDPOINT": "http://127.0.0.1:9999"}
    assert load_settings(env=mine).telemetry.otlp_endpoint == "http://127.0.0.1:9999"
    assert load_settings(env={}).telemetry.otlp_endpoint is None


@pytest.mark.slow
def test_a_collector_that_never_answers_costs_the_program_at_most_a_few_seconds_at_exit(tmp_path):
    """A collector that takes the connection and never answers: the answer is given as always,
    and at exit the spans still waiting are dropped after ``EXIT_WAIT`` seconds with one log line
    (the exporter alone would wait its 10 s timeout per try), never a traceback."""
    from pipeline.tracing import EXIT_WAIT

    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(8)  # connections queue in the backlog; nothing is ever read or answered
    try:
        env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{hanging.getsockname()[1]}",
                        HUGGINGGPT_STORAGE__DATA_DIR=str(tmp_path / "data"))
        p = subprocess.run([sys.executable, "-m", "hugginggpt", "run", "--sandbox", REQUEST, "--file", str(PHOTO)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        hanging.close()
    assert p.returncode in (0, 6) and p.stdout.strip() and "Traceback" not in p.stderr, p.stderr[-3000:]
    log = (tmp_path / "data" / "logs" / "hugginggpt.log").read_text()
    assert f"the last spans did not reach the trace collector within {EXIT_WAIT:g} s; they are dropped" in log
    assert "Traceback" not in log
