"""What the Prometheus metrics cost a run (bot/metrics.py): ``python -m benchmarks.bench_metrics``.

The real service runs ``--runs`` turns of each plan shape on the end-to-end stand-ins
(:mod:`benchmarks.e2e_standins`, in a process of their own, so their CPU is not counted), each
turn followed by :func:`adapters.turn.follow` as every front end does (which counts it in the
metrics). Printed per shape:

- **orchestration CPU ms/run**: this process's CPU time (``time.process_time``, every thread)
  over the runs ÷ runs: the bot's own work for a run, metrics included;
- **metrics CPU µs/run**: the CPU of exactly what ``follow`` adds for a turn
  (:class:`bot.metrics.TurnMetrics` made, then ``ended`` with the turn's record), timed over
  the records of those runs, repeated ``--repeat`` times;
- **overhead**: metrics CPU ÷ (orchestration CPU − metrics CPU), the share metrics add to a run
  (target < 3 %); with metrics off (the ``follow`` of a front end that counts nothing) the share is
  0 by construction: there is nothing else to switch off.

Then the CPU of one scrape (``/metrics``' text exposition of every series those runs made).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_e2e import _http, shapes, stand_in_service

ROOT = Path(__file__).resolve().parent.parent


class NullView:
    """A front end's view that shows nothing (the benchmark times the bot, not a platform)."""

    async def progress(self, progress: Any, event: Any) -> None:
        """Nothing shown."""

    async def answer(self, record: Any, progress: Any) -> None:
        """Nothing shown."""

    async def files(self, record: Any) -> None:
        """Nothing shown."""

    async def notice(self, sentence: str, outcome: Any) -> None:
        """Nothing shown."""

    async def end(self, outcome: Any, progress: Any) -> None:
        """Nothing shown."""


async def run_shape(urls: dict[str, str], data_dir: Path, plan: list, files: list[Path], runs: int
                    ) -> tuple[float, list]:
    """Orchestration CPU seconds per run of ``plan`` with ``files`` attached (after a warm-up
    run) and the runs' records."""
    from adapters.turn import follow
    from bot.incoming import IncomingFile, Message

    attached = [IncomingFile(f.read_bytes(), name=f.name) for f in files]

    service = await stand_in_service(urls, data_dir, plan, 0.0)
    _http(urls["base"], "/_reset", {"plan": plan, "plan_seconds": 0.0, "answer_seconds": 0.0})
    records = []
    try:
        await follow(service.handle(Message("warm up", attached)), NullView(), where="http bench")
        cpu0 = time.process_time()
        for i in range(runs):
            outcome = await follow(service.handle(Message(f"request number {i}", attached)), NullView(), where="http bench")
            assert outcome.record is not None and outcome.record.status == "ok", outcome
            records.append(outcome.record)
        cpu = (time.process_time() - cpu0) / runs
    finally:
        await service.close()
    return cpu, records


def metrics_cpu(records: list, repeat: int) -> float:
    """CPU seconds per run of what ``follow`` adds for metrics, over ``records``, ``repeat`` times."""
    from bot.metrics import TurnMetrics

    cpu0 = time.process_time()
    for _ in range(repeat):
        for record in records:
            TurnMetrics("http bench").ended("answered", record)
    return (time.process_time() - cpu0) / (repeat * len(records))


def scrape_cpu(repeat: int = 50) -> tuple[float, int]:
    """CPU seconds of one text exposition of this process's metrics, and its size in bytes."""
    from bot.metrics import exposition

    body = b""
    cpu0 = time.process_time()
    for _ in range(repeat):
        body, _ = asyncio.run(exposition())
    return (time.process_time() - cpu0) / repeat, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per plan shape")
    parser.add_argument("--repeat", type=int, default=20, help="repetitions of the metrics timing")
    parser.add_argument("--shapes", default="single image,chain of 3,fan-out of 6", help="comma-separated shapes")
    args = parser.parse_args()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.e2e_standins", "--latency", json.dumps({})],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    worst = 0.0
    try:
        urls = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        print(f"{args.runs} runs per shape, stand-ins in their own process, expert latency 0\n")
        print("| shape | tasks | orchestration CPU ms/run | metrics CPU µs/run | overhead |")
        print("|---|---:|---:|---:|---:|")
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.shapes.split(","):
                plan, files = shapes()[name]
                cpu, records = asyncio.run(run_shape(urls, Path(tmp) / name.replace(" ", "-"), plan, files, args.runs))
                added = metrics_cpu(records, args.repeat)
                share = added / (cpu - added)
                worst = max(worst, share)
                print(f"| {name} | {len(plan)} | {cpu * 1000:.1f} | {added * 1e6:.0f} | {share:.2%} |", flush=True)
        per_scrape, size = scrape_cpu()
        print(f"\nworst overhead: {worst:.2%} of orchestration CPU (target < 3 %)")
        print(f"one scrape: {per_scrape * 1000:.2f} ms CPU for {size / 1024:.0f} KiB of exposition")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
