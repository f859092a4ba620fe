"""Prometheus metrics (bot/metrics.py, expert_server/metrics.py, docs/operations.md "Metrics").

End to end: a real Prometheus (Debian's package) on 127.0.0.1, configured from the shipped
deploy/prometheus.yml with a 1 s scrape interval, scrapes a sandbox ``hugginggpt serve`` (in
multiprocess mode) and a real expert server serving a tiny ViT, while runs are made over the HTTP
API; its query API must then hold the runs, the stage histograms, the tasks and the expert
server's batches those runs made. In process: label values stay in their fixed sets whatever a
request, a plan or a provider name says, and the Discord / Socket Mode metrics port serves and
says when its port is taken.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.harness.realparts import Missing, PrometheusServer, free_port, wait_ready
from bot import metrics
from bot.errors import ConfigError
from bot.settings import TelemetrySettings
from pipeline.tasks import TASKS
from pipeline.types import Cost, CostLine, Output, RunRecord, Selection, Task, TaskResult

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT / "tests" / "fixtures" / "media" / "chelsea.png"
VIT = "tiny/vit-classifier"
ODD = 'user-4242 "} evil="1 <script>'
"""Text a caller controls, which must never appear in a label value."""


def _prometheus(root: Path, targets: dict[str, list[str]]) -> PrometheusServer:
    try:
        return PrometheusServer(root, targets).start()
    except Missing as e:
        if os.environ.get("HUGGINGGPT_REQUIRE_REAL_PARTS") == "1":
            raise
        pytest.skip(str(e))


def _expert_server(tmp_path: Path, port: int) -> tuple[subprocess.Popen, Path]:
    from benchmarks.harness import tinymodels

    cache = tmp_path / "hf-cache"
    tinymodels.build_cache(cache, {VIT: (tinymodels.vit, "image-classification")})
    (tmp_path / "experts.toml").write_text("")
    log = tmp_path / "experts.log"
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "expert_server", "--port", str(port), "--device", "cpu",
                             "--config", str(tmp_path / "experts.toml")], cwd=ROOT, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    return proc, log


def _serve(tmp_path: Path, experts_url: str) -> tuple[subprocess.Popen, Path]:
    """``hugginggpt serve --sandbox`` starting (its first line, with its address, not read yet)."""
    shared = tmp_path / "prometheus-multiproc"
    shared.mkdir()
    env = {**os.environ, "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "PROMETHEUS_MULTIPROC_DIR": str(shared),
           "HUGGINGGPT_INFERENCE__EXPERTS_URL": experts_url,
           "HUGGINGGPT_INFERENCE__EXPERTS_TTL": "0.2"}  # down while it starts: asked again at the first run
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "hugginggpt", "serve", "--sandbox", "--port", "0", "--grace", "2"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=open(log, "wb"), text=True)  # noqa: SIM115
    return proc, log


def _address(proc: subprocess.Popen, log: Path) -> str:
    line = proc.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+)/v1", line)
    assert m, line + log.read_text()
    return m.group(1)


def _ask(url: str, text: str, photo: bool) -> str:
    content: list[dict] = [{"type": "text", "text": text}]
    if photo:
        data = base64.b64encode(PHOTO.read_bytes()).decode()
        content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}})
    r = httpx2.post(f"{url}/v1/chat/completions", json={"model": "hugginggpt", "messages": [
        {"role": "user", "content": content}]}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_prometheus_scrapes_the_runs_stages_tasks_and_expert_batches_that_were_made(tmp_path):
    port = free_port()
    experts_url = f"http://127.0.0.1:{port}"
    serve, serve_log = _serve(tmp_path, experts_url)  # starts while the tiny model is built
    experts = prom = None
    try:
        experts, experts_log = _expert_server(tmp_path, port)
        url = _address(serve, serve_log)
        wait_ready(experts_url, experts, 120, lambda: experts_log.read_text(errors="replace"))
        prom = _prometheus(tmp_path / "prometheus", {"hugginggpt-api": [url.removeprefix("http://")],
                                                     "hugginggpt-experts": [experts_url.removeprefix("http://")]})
        assert "tiny/vit-classifier" in _ask(url, "What animal is in this photo? Classify it.", photo=True)
        assert "tiny/vit-classifier" in _ask(url, "Classify this image please.", photo=True)
        _ask(url, f"Write a short poem about {ODD}", photo=False)  # a task on the controller, odd text

        runs = 'sum(hugginggpt_runs_total{job="hugginggpt-api",front_end="http",outcome="answered"})'
        assert prom.wait_value(runs, 3) == 3, serve_log.read_text()[-2000:]
        assert prom.wait_value('sum(up{job="hugginggpt-experts"})', 1) == 1
        for stage in ("task_planning", "model_selection", "task_execution", "response_generation"):
            assert prom.value(f'sum(hugginggpt_stage_seconds_count{{stage="{stage}"}})') == 3, stage
            assert prom.value(f'sum(hugginggpt_stage_seconds_sum{{stage="{stage}"}})') > 0, stage
        classified = 'sum(hugginggpt_tasks_total{task="image-classification",where="local",outcome="ok"})'
        assert prom.value(classified) == 2
        assert prom.value('sum(hugginggpt_tasks_total{where="controller",outcome="ok"})') >= 1
        assert prom.value('sum(hugginggpt_expert_call_seconds_count{where="local"})') == 2
        assert prom.value('sum(hugginggpt_controller_tokens_total{direction="input"})') > 0
        assert prom.value("sum(hugginggpt_runs_in_flight)") == 0
        # the expert server's own figures, for the same two calls
        assert prom.wait_value(f'hugginggpt_experts_batch_items_total{{model="{VIT}"}}', 2) == 2
        assert prom.value('hugginggpt_experts_models{state="loaded"}') == 1
        assert prom.value('hugginggpt_experts_memory_used_bytes{holder="models"}') > 0
        assert prom.value(f'hugginggpt_experts_queue_length{{model="{VIT}"}}') == 0
        # no label value came from the request's text
        for series in prom.query('{__name__=~"hugginggpt_.+"}'):
            assert not {v for v in series["metric"].values() if "4242" in v or "evil" in v or "<" in v}, series
        _dashboard_reads_what_was_scraped(prom)
    finally:
        if prom is not None:
            prom.stop()
        _stop(serve)
        if experts is not None:
            _stop(experts)


NOT_MADE_HERE = {"hugginggpt_cost_usd_total", "hugginggpt_store_errors_total", "hugginggpt_degraded_turns_total"}
"""Counters the scraped runs did not move (no cost records, no store failure): absent until they do."""


def _dashboard_reads_what_was_scraped(prom: PrometheusServer) -> None:
    """Every query of deploy/grafana-dashboard.json is accepted by Prometheus and reads metrics
    that exist (a renamed metric or a typo would leave its panel empty)."""
    import json

    scraped = {s["metric"]["__name__"] for s in prom.query('count by (__name__) ({__name__=~"hugginggpt_.+"})')}
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    for expr in exprs:
        prom.query(expr.replace("$__rate_interval", "1m"))  # raises unless status is success
        assert set(re.findall(r"hugginggpt_\w+", expr)) <= scraped | NOT_MADE_HERE, expr


def _label_values() -> dict[str, set[str]]:
    """Label name → every value it has on the bot's metrics now (this process)."""
    values: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        if family.name.startswith("hugginggpt_"):
            for sample in family.samples:
                for name, value in sample.labels.items():
                    if name != "le":
                        values.setdefault(name, set()).add(value)
    return values


def test_label_values_stay_in_their_fixed_sets_whatever_the_run_says():
    odd_tag = f"image-classification {ODD}"
    record = RunRecord(
        ODD, tasks=[Task(1, odd_tag), Task(2, "translation"), Task(3, f"mcp.{ODD}.tool")],
        selections={1: Selection(1, ODD, "r", where=f"provider {ODD}"),
                    2: Selection(2, "m", "r", where="provider evil-corp")},
        results={1: TaskResult(1, "ok", output=Output(text=ODD, where=f"gateway http://{ODD}"), started=1.0, finished=2.0),
                 2: TaskResult(2, "failed", error=ODD, started=1.0, finished=1.5),
                 3: TaskResult(3, "ok", started=1.0, finished=1.2)},
        timings_ms={"planning": 10.0, ODD: 5.0, "total": 20.0})
    turn = metrics.TurnMetrics(f"{ODD} C1/1")
    turn.ended(ODD, record)
    metrics.TurnMetrics("slack C1/1").ended("answered", record)
    metrics.store_error(ODD)
    metrics.degraded_turn(ODD)
    metrics.observe_cost(0.25, ODD)

    allowed = {
        "front_end": {*metrics.FRONT_ENDS, metrics.OTHER}, "outcome": {*metrics.OUTCOMES, *metrics.TASK_OUTCOMES, metrics.OTHER},
        "stage": set(metrics.STAGES.values()), "task": {*TASKS, "mcp", metrics.OTHER}, "where": {*metrics.WHERES, metrics.OTHER},
        "provider": {"", metrics.OTHER}, "direction": {"input", "output"}, "step": {*metrics.STORE_STEPS, metrics.OTHER},
    }
    seen = _label_values()
    assert set(seen) <= set(allowed), set(seen) - set(allowed)
    for name, values in seen.items():
        assert values <= allowed[name], (name, values - allowed[name])
    assert {"other", "translation", "mcp"} <= seen["task"] and "slack" in seen["front_end"]


def test_a_runs_known_cost_is_added_to_the_cost_counter_and_an_unknown_part_is_not():
    before = REGISTRY.get_sample_value("hugginggpt_cost_usd_total", {"front_end": "discord"}) or 0.0
    record = RunRecord("draw a cat", cost=Cost((CostLine("controller", None), CostLine("task 1 (text-to-image) on fal-ai", 0.04))))
    metrics.TurnMetrics("discord G1/C1").ended("answered", record)
    after = REGISTRY.get_sample_value("hugginggpt_cost_usd_total", {"front_end": "discord"})
    assert after == pytest.approx(before + 0.04)


async def test_the_bots_metrics_port_serves_and_says_when_it_is_taken():
    port = free_port()
    with metrics.metrics_port(TelemetrySettings(metrics_port=port)):
        r = await asyncio.to_thread(httpx2.get, f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert "hugginggpt_event_loop_lag_seconds" in r.text
        with pytest.raises(ConfigError) as info:
            with metrics.metrics_port(TelemetrySettings(metrics_port=port)):
                pass
        assert info.value.user_message.startswith(f"I cannot serve metrics on 127.0.0.1:{port} (")
        assert info.value.user_message.endswith("choose another [telemetry] metrics_port.")
    with pytest.raises(OSError):  # stopped with the bot: nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    with metrics.metrics_port(TelemetrySettings()):  # unset (the default): no server thread at all
        assert not [t for t in threading.enumerate() if t.name == "metrics"]


async def test_a_turn_answered_without_memory_counts_a_store_error_and_a_degraded_turn(sandbox, tmp_path):
    from tests.test_storage_degraded import fill_up, service_on, turn
    from tests.test_storage_faults import small_disk

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = (sample("hugginggpt_store_errors_total", step="open_turn"),
              sample("hugginggpt_degraded_turns_total", front_end="slack"))
    with small_disk(tmp_path / "disk") as disk:
        async with service_on(sandbox, disk) as service:
            filler = fill_up(disk)
            notes, done = await turn(service, "Say hello")
            assert notes and done.record.answered and done.record.conversation_id is None  # without memory
            filler.unlink()
            await turn(service, "Say hello again")  # stored again: neither count moves
    after = (sample("hugginggpt_store_errors_total", step="open_turn"),
             sample("hugginggpt_degraded_turns_total", front_end="slack"))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of ``name{labels}`` in a text exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


async def test_the_slack_http_server_serves_metrics_that_count_its_turns(slack, tmp_path):
    import json

    import aiohttp
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.handler import create_bolt_app
    from adapters.slack.serve import Replica, serve_http
    from benchmarks.harness.slack import CHANNEL, SECRET, bot_settings, make_service
    from sandbox.slack_api import signed_headers

    async with make_service(tmp_path) as service:
        settings = bot_settings(service, bot_token=slack.bot_token, signing_secret=SECRET, mode="http")
        front = create_bolt_app(settings, service, AsyncWebClient(token=slack.bot_token, base_url=slack.api_url))
        runner = await serve_http(front.app, Replica(lambda: service.storage_problems(store_only=True), "/slack/events"),
                                  "127.0.0.1", 0, "/slack/events", SECRET)
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        answered = {"front_end": "slack", "outcome": "answered"}
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/metrics") as r:  # no signature: Slack's checks are for its path only
                    assert r.status == 200 and r.content_type == "text/plain"
                    before = _sample(await r.text(), "hugginggpt_runs_total", **answered)
                msg = slack.add_user_message(CHANNEL, f"<@{slack.bot_user_id}> Write a haiku about autumn")
                raw = json.dumps(slack.event_body({"type": "app_mention", "user": "U1", "text": msg.text, "ts": msg.ts,
                                                   "channel": CHANNEL, "team": slack.team_id, "event_ts": msg.ts}))
                async with http.post(f"{base}/slack/events", data=raw,
                                     headers={**signed_headers(SECRET, raw), "Content-Type": "application/json"}) as r:
                    assert r.status == 200
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not any(m.user == slack.bot_user_id
                                                              for m in slack.thread(CHANNEL, msg.ts)):
                    await asyncio.sleep(0.1)
                if front.bot.tasks:
                    await asyncio.wait(set(front.bot.tasks), timeout=30)
                async with http.get(f"{base}/metrics") as r:
                    text = await r.text()
            assert _sample(text, "hugginggpt_runs_total", **answered) == before + 1
            assert _sample(text, "hugginggpt_runs_in_flight", front_end="slack") == 0
        finally:
            await runner.cleanup()
            await front.bot.close(timeout=1)
