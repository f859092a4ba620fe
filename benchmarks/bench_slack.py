"""Benchmark of the Slack front end's delivery path.

Measures the time from posting a signed Events API body to receiving bolt's HTTP acknowledgement
(real aiohttp server and client on 127.0.0.1, the stand-in Slack Web API, the service running the
requests in the background on the same event loop), at 1 and at 50 simultaneous events, and counts
duplicate answers when every mention is delivered three times (``app_mention``, ``message`` for the
same ``ts``, and a retry with ``X-Slack-Retry-Num: 1``).

Targets (issue 5): p99 acknowledgement < 100 ms; duplicate deliveries answered: 0.

    python benchmarks/bench_slack.py [--sequential 100] [--burst 50] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from slack_harness import start_harness  # noqa: E402
from slack_service import SERVICE_KIND, make_service  # noqa: E402
from standins.slack_api import SlackStandIn  # noqa: E402


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def line(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"{label:<34} n={len(ms):<4} p50={statistics.median(ms):6.1f} ms  p99={pct(ms, 99):6.1f} ms  "
            f"max={max(ms):6.1f} ms")


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        async with SlackStandIn() as slack, make_service(Path(tmp)) as service:
            h = await start_harness(slack, service, Path(tmp), rate_limit_per_minute=0)
            try:
                warm, _, _ = h.mention("draw a picture of a red fox", user="U0WARM")
                _, first = await h.deliver(warm)  # includes bolt's one-time auth.test
                await h.settle(120)

                sequential: list[float] = []
                mentions: list[tuple[str, str, list[dict]]] = []  # (channel, ts, replays)
                for i in range(args.sequential):
                    ch = f"C{i % args.channels:05d}"
                    a, m, ts = h.mention(f"draw a picture of a red fox number {i}", user=f"U{i % 20:04d}", channel=ch)
                    status, dt = await h.deliver(a)
                    assert status == 200, status
                    sequential.append(dt)
                    mentions.append((ch, ts, [m, a]))
                burst: list[float] = []
                for r in range(args.rounds):
                    chans = [f"C{i % args.channels:05d}" for i in range(args.burst)]
                    batch = [h.mention(f"draw a picture of a boat number {r}-{i}", user=f"U{i:04d}", channel=ch)
                             for i, ch in enumerate(chans)]
                    results = await asyncio.gather(*(h.deliver(a) for a, _, _ in batch))
                    assert all(s == 200 for s, _ in results), results
                    burst += [dt for _, dt in results]
                    mentions += [(ch, ts, [m, a]) for ch, (a, m, ts) in zip(chans, batch)]
                # replays: the `message` event for every mention and a retry of every app_mention,
                # delivered 50 at a time while the runs are in flight
                replays = [(body, 1 if i == 1 else None) for _, _, pair in mentions for i, body in enumerate(pair)]
                replay_times: list[float] = []
                for i in range(0, len(replays), args.burst):
                    chunk = replays[i:i + args.burst]
                    results = await asyncio.gather(*(h.deliver(b, retry_num=n) for b, n in chunk))
                    replay_times += [dt for _, dt in results]
                # every run posts its status message first: one per mention, or a duplicate answer
                await slack.wait_for(lambda: all(h.replies(ts, channel=ch) for ch, ts, _ in mentions), timeout=120)
                t0 = time.perf_counter()
                try:
                    await h.settle(args.drain)
                except AssertionError:
                    pass
                drain = time.perf_counter() - t0
                await asyncio.sleep(0.5)  # let any late duplicate post its status message
                per_thread = [len(h.replies(ts, channel=ch)) and
                              len([m for m in h.replies(ts, channel=ch) if m.text.startswith((":thinking_face:", ":gear:", ":writing_hand:", ":white_check_mark: Done", ":warning:"))])
                              for ch, ts, _ in mentions]
                duplicates = sum(max(0, n - 1) for n in per_thread)
                missing = sum(1 for n in per_thread if n == 0)
                finished = sum(1 for ch, ts, _ in mentions if len(h.replies(ts, channel=ch)) >= 2)
                print(f"service: {SERVICE_KIND}")
                print(f"first event (bolt auth.test once)  {first * 1000:.1f} ms")
                print(line("ack, 1 event at a time", sequential))
                print(line(f"ack, {args.burst} simultaneous events", burst))
                print(line(f"ack, replays {args.burst} at a time", replay_times))
                print(f"mentions {len(mentions)}, deliveries {len(mentions) * 3}, runs started {h.bot.stats.runs}, "
                      f"duplicates suppressed {h.bot.stats.duplicates}")
                print(f"duplicate answers {duplicates}, unanswered mentions {missing}")
                print(f"answers posted within {drain:.1f} s after the last delivery: {finished}/{len(mentions)} "
                      "(status edits share chat.update's ~50/minute budget; posts pace at ~1/s per channel)")
                ok = pct(sequential, 99) < 0.1 and pct(burst, 99) < 0.1 and duplicates == 0 and missing == 0
                print("targets met" if ok else "TARGETS NOT MET")
                return 0 if ok else 1
            finally:
                await h.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequential", type=int, default=100, help="events delivered one at a time")
    p.add_argument("--burst", type=int, default=50, help="events delivered simultaneously")
    p.add_argument("--rounds", type=int, default=4, help="bursts")
    p.add_argument("--channels", type=int, default=50, help="channels the mentions are spread over")
    p.add_argument("--drain", type=float, default=20.0, help="seconds to wait for runs to finish before stopping")
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
