"""Benchmark of the Slack front end's delivery path.

Measures the time from posting a signed Events API body to receiving bolt's HTTP acknowledgement,
at 1 and at 50 simultaneous events, and counts duplicate answers when every mention is delivered
three times (``app_mention``, ``message`` for the same ``ts``, and a retry with
``X-Slack-Retry-Num: 1``).

Set-up: this process serves the bot (bolt ``AsyncApp`` on aiohttp, 127.0.0.1) with the real
``Service`` on the sandbox backends and the stand-in Slack Web API, all on one event loop, so the
runs started by earlier events compete with the acknowledgements of later ones. The events are
sent by a separate load-generator process (this file with ``--client``), like Slack's senders, so
its own CPU time does not count against the bot.

Targets (issue 5): p99 acknowledgement < 100 ms; duplicate deliveries answered: 0.

    python benchmarks/bench_slack.py [--sequential 100] [--burst 50] [--rounds 4] [--channels 50]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
import benchmarks  # noqa: E402,F401 - the program's environment defaults, as `python -m benchmarks.…` has them


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def line(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"{label:<36} n={len(ms):<4} p50={statistics.median(ms):6.1f} ms  p99={pct(ms, 99):6.1f} ms  "
            f"max={max(ms):6.1f} ms")


def outcome(text: str) -> str:
    """What a finished reply says, in a word: an answer, or the first words of a refusal/error."""
    if "Here is what I found" in text or "Sandbox stand-in controller" in text:
        return "answer"
    return " ".join(text.split()[:6])


# ---------------------------------------------------------------------------------- load generator


async def client_main() -> int:
    """``--client``: read the plan (JSON on stdin), send the phases, print latencies (JSON)."""
    import aiohttp

    from sandbox.slack_api import signed_headers

    plan = json.loads(sys.stdin.read())
    url, secret = plan["url"], plan["secret"]
    out: dict[str, list[float]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def deliver(body: dict, retry: int | None) -> float:
            raw = json.dumps(body)
            headers = signed_headers(secret, raw, retry)
            t0 = time.perf_counter()
            async with session.post(url, data=raw, headers=headers) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            return time.perf_counter() - t0

        for phase in plan["phases"]:
            times = out.setdefault(phase["name"], [])
            items = phase["items"]
            step = phase["concurrency"]
            for i in range(0, len(items), step):
                chunk = items[i:i + step]
                times += await asyncio.gather(*(deliver(b, r) for b, r in chunk))
                if step > 1:
                    await asyncio.sleep(phase.get("pause", 0.2))
    print(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------------- bot side


async def run(args: argparse.Namespace) -> int:
    from benchmarks.harness.slack import SECRET, start_harness
    from benchmarks.harness.slack import SERVICE_KIND, make_service
    from sandbox.slack_api import SlackStandIn

    with tempfile.TemporaryDirectory() as tmp:
        async with SlackStandIn() as slack, make_service(Path(tmp)) as service:
            h = await start_harness(slack, service, Path(tmp), rate_limit_per_minute=0)
            try:
                warm, _, _ = h.mention("draw a picture of a red fox", user="U0WARM")
                _, first = await h.deliver(warm)  # includes bolt's one-time auth.test
                await h.settle(120)

                mentions: list[tuple[str, str]] = []
                seq_items, burst_items, replay_items = [], [], []
                for i in range(args.sequential):
                    ch = f"C{i % args.channels:05d}"
                    a, m, ts = h.mention(f"draw a picture of a red fox number {i}", user=f"U{i % 20:04d}", channel=ch)
                    seq_items.append((a, None))
                    replay_items += [(m, None), (a, 1)]
                    mentions.append((ch, ts))
                for i in range(args.burst * args.rounds):
                    ch = f"C{i % args.channels:05d}"
                    a, m, ts = h.mention(f"draw a picture of a boat number {i}", user=f"U{i % args.burst:04d}", channel=ch)
                    burst_items.append((a, None))
                    replay_items += [(m, None), (a, 1)]
                    mentions.append((ch, ts))
                plan = {"url": h.url, "secret": SECRET, "phases": [
                    {"name": "sequential", "concurrency": 1, "items": seq_items},
                    {"name": "burst", "concurrency": args.burst, "items": burst_items},
                    {"name": "replays", "concurrency": args.burst, "items": replay_items},
                ]}
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--client", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
                out, _ = await proc.communicate(json.dumps(plan).encode())
                if proc.returncode != 0:
                    print("load generator failed", file=sys.stderr)
                    return 2
                times = json.loads(out)

                # Socket Mode: the same app behind AsyncSocketModeHandler, envelopes over the stand-in
                # websocket (timed in this process, from sending the envelope to receiving its ack)
                socket_seq, socket_burst = [], []
                if args.socket:
                    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

                    handler = AsyncSocketModeHandler(h.app, app_token=slack.app_token)
                    await handler.connect_async()
                    try:
                        for i in range(args.sequential):
                            a, m, ts = h.mention(f"draw a picture of a kite number {i}", user=f"U{i % 20:04d}",
                                                 channel=f"C{i % args.channels:05d}")
                            eid = await slack.socket_send(a)
                            await slack.wait_for(lambda: eid in slack.acks, timeout=10)
                            socket_seq.append(slack.acks[eid])
                            mentions.append((f"C{i % args.channels:05d}", ts))
                        for r in range(args.rounds):
                            eids = []
                            for i in range(args.burst):
                                ch = f"C{i % args.channels:05d}"
                                a, m, ts = h.mention(f"draw a picture of a tree number {r}-{i}", user=f"U{i:04d}", channel=ch)
                                eids += [await slack.socket_send(a), await slack.socket_send(m),
                                         await slack.socket_send(a, retry_attempt=1)]
                                mentions.append((ch, ts))
                            await slack.wait_for(lambda: all(e in slack.acks for e in eids), timeout=30)
                            socket_burst += [slack.acks[e] for e in eids]
                            await asyncio.sleep(0.2)
                    finally:
                        await handler.close_async()

                # every run posts its status message first: one per mention, more is a duplicate answer
                await slack.wait_for(lambda: all(h.replies(ts, channel=ch) for ch, ts in mentions), timeout=120)
                t0 = time.perf_counter()
                try:
                    await h.settle(args.drain)
                except AssertionError:
                    pass
                drain = time.perf_counter() - t0
                await asyncio.sleep(0.5)  # let a late duplicate show up
                # each run replies with one message (a chat stream or a status message): more is a duplicate
                # answer; a reply no longer streaming is finished (answer, refusal or error)
                replies = [[m for m in h.replies(ts, channel=ch) if not m.files] for ch, ts in mentions]
                duplicates = sum(max(0, len(r) - 1) for r in replies)
                deliveries = len(seq_items) + len(burst_items) + len(replay_items) + len(socket_seq) + len(socket_burst)
                missing = sum(1 for r in replies if not r)
                answered = sum(1 for r in replies if r and not r[0].streaming)
                kinds = collections.Counter(outcome(r[0].text) for r in replies if r and not r[0].streaming)
                print(f"service: {SERVICE_KIND}")
                print(f"first event (bolt auth.test once)    {first * 1000:.1f} ms")
                print(line("ack, 1 event at a time", times["sequential"]))
                print(line(f"ack, {args.burst} simultaneous events", times["burst"]))
                print(line(f"ack, replays {args.burst} at a time", times["replays"]))
                if socket_seq:
                    print(line("Socket Mode ack, 1 event at a time", socket_seq))
                    print(line(f"Socket Mode ack, {3 * args.burst} queued", socket_burst))
                print(f"mentions {len(mentions)}, deliveries {deliveries}, runs started {h.bot.stats.runs - 1}, "
                      f"duplicate deliveries suppressed {h.bot.stats.duplicates}")
                print(f"duplicate answers {duplicates}, unanswered mentions {missing}")
                print(f"answers posted within {drain:.1f} s after the last delivery: {answered}/{len(mentions)}")
                print("finished replies: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
                ok = (pct(times["sequential"], 99) < 0.1 and pct(times["burst"], 99) < 0.1 and duplicates == 0
                      and missing == 0)
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
    p.add_argument("--no-socket", dest="socket", action="store_false", help="skip the Socket Mode phase")
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    return asyncio.run(client_main() if args.client else run(args))


if __name__ == "__main__":
    sys.exit(main())
