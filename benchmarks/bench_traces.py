"""What traces cost a run: ``python -m benchmarks.bench_traces [--runs N] [--rounds R] [--before PATH]``.

The stand-in controller and experts run in a process of their own (:mod:`benchmarks.e2e_standins`),
the stand-in OTLP/HTTP collector in a thread of this one (:mod:`benchmarks.harness.otlp`), so
neither is counted. Each measurement is a fresh child process that builds the real service and
answers ``--runs`` requests of a 3-task chain one after the other (after 3 warm-up runs), and
reports its CPU time per run (``time.process_time``: every thread, the exporter's included), the
spans still waiting flushed to the collector before the clock stops. Modes, interleaved over
``--rounds`` rounds (medians):

- **before**: the code of ``--before`` (a checkout without traces, e.g. the main branch), if given;
- **off**: this code, no endpoint (nothing of OpenTelemetry is imported);
- **off again**: the same, a second series: how far two identical series differ (the noise);
- **on**: this code, spans exported over OTLP/HTTP to the stand-in collector.

Printed: CPU ms per run of each mode, and each as a ratio to **off** (target: on < 1.03). As the
difference is below what two identical series differ by, a last child also measures what one span
costs alone (made with the product's attributes, ended, exported to the collector, ``--spans`` of
them), which times the spans of a run (counted at the collector) gives the cost per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARM = 3
"""Runs before the clock starts (imports, connections, the first plan)."""


def chain() -> list[dict[str, Any]]:
    """The plan every run gets: text-to-image, then a caption of it, then its classification."""
    return [
        {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a lighthouse"}},
        {"task": "image-to-text", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
        {"task": "image-classification", "id": 2, "dep": [0], "args": {"image": "<resource>-0"}},
    ]


async def child(urls: dict[str, str], endpoint: str | None, runs: int, data_dir: str) -> float:
    """CPU milliseconds per run of the service in this process (see the module docstring)."""
    from bot.incoming import Message
    from bot.service import Service
    from bot.settings import load_settings

    if endpoint:
        from pipeline import tracing

        tracing.install(endpoint, service="hugginggpt")
    overrides = {
        "llm": {"base_url": urls["controller"], "api_key": "bench", "model": "bench", "max_retries": 0},
        "inference": {"base_url": urls["inference"], "provider": None, "token": None, "selection": "top"},
        "storage": {"data_dir": data_dir},
    }
    service = await Service.create(load_settings(env={}, overrides=overrides), conversations=False)

    async def one() -> None:
        async for event in service.handle(Message("draw a lighthouse and tell me what it is")):
            record = getattr(event, "record", None)
            if record is not None and record.status != "ok":
                raise SystemExit(f"a run ended {record.status}: {record.error}")

    try:
        for _ in range(WARM):
            await one()
        cpu = time.process_time()
        for _ in range(runs):
            await one()
        if endpoint:
            from pipeline import tracing

            tracing.shutdown()  # the spans still waiting are sent: their export counts
        return (time.process_time() - cpu) * 1000 / runs
    finally:
        await service.close()


def span_cost(endpoint: str, count: int) -> float:
    """CPU microseconds one span costs in this process: made current with a task's attributes,
    ended and exported (the exporter's thread counted, the last batch flushed)."""
    from pipeline import tracing

    tracing.install(endpoint, service="hugginggpt")
    cpu = time.process_time()
    for i in range(count):
        with tracing.span("task", {"task.id": i, "task.tag": "image-classification", "model.id": "google/vit-base",
                                   "runner": "hub", "where": "provider", "outcome": "ok"}):
            pass
    tracing.shutdown(wait=60)
    return (time.process_time() - cpu) * 1e6 / count


def measure(code: Path, urls: dict[str, str], endpoint: str | None, runs: int, data_dir: Path) -> float:
    """One child process's CPU ms per run, with ``code`` first on its path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "OTEL_"))}
    env["PYTHONPATH"] = str(code)
    args = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(urls), "--runs", str(runs),
            "--data-dir", str(data_dir)]
    if endpoint:
        args += ["--endpoint", endpoint]
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, cwd=code)
    if p.returncode != 0:
        raise SystemExit(f"the measuring process failed: {p.stderr[-2000:]}")
    return float(p.stdout.strip().splitlines()[-1])


def measure_spans(endpoint: str, count: int) -> float:
    """:func:`span_cost` in a child process of this code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "OTEL_"))}
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--spans", str(count), "--endpoint", endpoint,
                        "--span-child"], capture_output=True, text=True,
                       # every span queued (none dropped for a full queue), so each one's export counts
                       env={**env, "PYTHONPATH": str(ROOT), "OTEL_BSP_MAX_QUEUE_SIZE": str(count + 1)},
                       timeout=600, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"the measuring process failed: {p.stderr[-2000:]}")
    return float(p.stdout.strip().splitlines()[-1])


def _reset(base: str) -> None:
    body = json.dumps({"plan": chain(), "plan_seconds": 0.05, "answer_seconds": 0.0}).encode()
    req = urllib.request.Request(base + "/_reset", data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


def main(args: argparse.Namespace) -> None:
    import tempfile

    sys.path.insert(0, str(ROOT))
    from benchmarks.harness.otlp import OtlpReceiver

    standins = subprocess.Popen([sys.executable, "-m", "benchmarks.e2e_standins"], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert standins.stdout is not None
        urls = json.loads(standins.stdout.readline())
        _reset(urls["base"])
        modes: dict[str, tuple[Path, bool]] = {"off": (ROOT, False), "off again": (ROOT, False), "on": (ROOT, True)}
        if args.before:
            modes = {"before": (Path(args.before).resolve(), False), **modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        with OtlpReceiver() as receiver, tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                for mode, (code, on) in modes.items():
                    cpu[mode].append(measure(code, urls, receiver.url if on else None, args.runs, Path(tmp) / "data"))
            spans = len(receiver.snapshot())
            per_span = measure_spans(receiver.url, args.spans)
    finally:
        standins.terminate()
        standins.wait(10)
    off = statistics.median(cpu["off"])
    print(f"CPU per run of the service, 3-task chain, {args.runs} runs x {args.rounds} rounds per mode (medians); "
          f"{spans} spans received by the stand-in collector\n")
    print("| mode | CPU ms/run | ÷ off |\n|---|---|---|")
    for mode, values in cpu.items():
        median = statistics.median(values)
        print(f"| {mode} | {median:.2f} | {median / off:.3f} |")
    per_run = spans / (args.rounds * (args.runs + WARM))
    print(f"\nOne span: {per_span:.1f} µs of CPU (made, ended, exported); {per_run:.0f} spans a run: "
          f"{per_span * per_run / 1000:.3f} ms, {per_span * per_run / 10 / off:.2f} % of off's CPU per run")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per measuring process")
    parser.add_argument("--rounds", type=int, default=3, help="measuring processes per mode, interleaved")
    parser.add_argument("--before", default=None, help="a checkout without traces, measured as 'before'")
    parser.add_argument("--spans", type=int, default=20000, help="spans made to measure one span's cost")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--span-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", default=None, help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.span_child:
        print(span_cost(parsed.endpoint, parsed.spans))
    elif parsed.child is not None:
        print(asyncio.run(child(json.loads(parsed.child), parsed.endpoint, parsed.runs, parsed.data_dir)))
    else:
        main(parsed)
