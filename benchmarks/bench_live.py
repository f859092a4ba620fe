"""Benchmark of the live Slack reply (issue "Native live experience"): ``python -m benchmarks.bench_live``.

Set-up: one process serves the bot (bolt on aiohttp, 127.0.0.1) with the real ``Service`` on the
sandbox backends and the stand-in Slack, all on one event loop; ``--runs`` requests arrive at once
(each "describe this image and draw …" on a real photo; drawing takes 30 s at the stand-in, so the
runs are still going when they are stopped).

Prints, over the runs (p50, p99, max):

- **plan ready → first task card**: from the service handing out the plan's first task
  (``TaskPlanned``/``PlanReady``, timed by wrapping the service) to the stand-in Slack receiving
  the first ``task_update`` chunk of that run's stream (target p99 < 300 ms at 20 runs);
- **Stop → stopped**: from the Stop button's ``block_actions`` request to the stand-in receiving
  the ``chat.stopStream`` that ends the run with what finished (target p99 < 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def _row(label: str, seconds: list[float]) -> str:
    ms = sorted(v * 1000 for v in seconds)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return f"| {label} | {len(ms)} | {statistics.median(ms):.0f} | {p99:.0f} | {ms[-1]:.0f} |"


class TimedService:
    """The service, with the moment each run's plan first had a task (by thread)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.plan_ready: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def handle(self, message: Any) -> Any:
        from pipeline.types import PlanReady, TaskPlanned

        key = message.key
        async for event in self._inner.handle(message):
            if isinstance(event, (TaskPlanned, PlanReady)) and key is not None:
                self.plan_ready.setdefault(key.thread, time.monotonic())
            yield event


async def run(runs: int) -> None:
    from adapters.slack.web import STOP_ACTION
    from benchmarks.harness.slack import start_harness
    from benchmarks.harness.slack import make_service
    from sandbox.slack_api import SlackStandIn

    photo = (ROOT / "tests" / "fixtures" / "media" / "chelsea.png").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        async with SlackStandIn() as slack, make_service(Path(tmp), latency={"text-to-image": 30}) as svc:
            timed = TimedService(svc)
            h = await start_harness(slack, timed, Path(tmp))
            h.bot.update_interval = 1.0  # production pace of edits
            try:
                threads = []
                bodies = []
                for i in range(runs):
                    f = slack.add_file(photo, "chelsea.png", "image/png")
                    body, _, ts = h.mention(f"describe this image and draw a picture of a red fox number {i}", files=[f],
                                            user=f"U{i:03d}")  # one request each: within the per-user rate limit
                    bodies.append(body)
                    threads.append(ts)
                await asyncio.gather(*(h.deliver(b) for b in bodies))

                def reply(ts: str) -> Any:
                    return next((m for m in h.replies(ts) if m.tasks.get("task-1")), None)

                await slack.wait_for(lambda: all(reply(ts) for ts in threads), timeout=60)
                first_card = []
                for ts in threads:
                    r = reply(ts)
                    first_card.append(min(t for t, _, _ in r.task_updates) - timed.plan_ready[ts])
                await slack.wait_for(lambda: all(reply(ts).tasks["task-0"]["status"] == "complete" for ts in threads), timeout=60)
                pressed: dict[str, float] = {}

                async def press(ts: str) -> None:
                    r = reply(ts)
                    value = next(b for b in r.blocks if b["type"] == "actions")["elements"][0]["value"]
                    pressed[ts] = time.monotonic()
                    await h.click(r, STOP_ACTION, value, user=f"U{threads.index(ts):03d}")

                await asyncio.gather(*(press(ts) for ts in threads))
                await slack.wait_for(lambda: all(not reply(ts).streaming for ts in threads), timeout=30)
                stopped = [reply(ts).edits[-1][0] - pressed[ts] for ts in threads]
                assert all("You stopped this run" in reply(ts).text for ts in threads)
            finally:
                await h.close()
    print(f"{runs} runs at once, one process (bot, service on sandbox backends, stand-in Slack)\n")
    print("| measure | runs | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|")
    print(_row("plan ready → first task card", first_card))
    print(_row("Stop pressed → run stopped (stream closed with what finished)", stopped))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    asyncio.run(run(p.parse_args().runs))


if __name__ == "__main__":
    main()
