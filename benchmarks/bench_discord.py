"""Benchmark of the Discord front end: time from INTERACTION_CREATE to the deferral, and memory per
active thread.

Everything runs in one process on 127.0.0.1: the stand-in Discord (REST + gateway,
``tests/standins/discord_server.py``), the real discord.py client (:class:`HuggingGPTBot`), the
real Service on the sandbox backends. Each command comes from a different user (so per-user rate
limits do not refuse them) and attaches nothing.

- Deferral latency: the stand-in stamps ``time.monotonic()`` just before it writes each
  INTERACTION_CREATE frame and when the bot's callback (type 5, "thinking") arrives. Measured for
  1 command at a time and for 50 sent at once (back to back on the gateway socket), several rounds.
- Memory per active thread: tracemalloc's traced Python memory before and after N runs are in
  flight (each held on a slow stand-in model), divided by N. It covers the whole process (bot,
  service, stand-ins' records of the messages), so it is an upper bound for the bot itself.

Run: ``python -m benchmarks.bench_discord [--rounds R] [--burst 50] [--active 50]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from adapters.discord.bot_client import HuggingGPTBot  # noqa: E402
from bot.settings import load_settings  # noqa: E402
from bot.sandbox import Sandbox  # noqa: E402
from bot.service import Service  # noqa: E402
from tests.standins.discord_server import StandinDiscord  # noqa: E402

MEDIA = ROOT / "tests" / "fixtures" / "media"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


@contextlib.asynccontextmanager
async def stack(data_dir: Path, latency: dict[str, float] | None = None):
    async with Sandbox(latency=latency) as sb, StandinDiscord(MEDIA) as d:
        old = d.patch_client_urls()
        overrides = sb.overrides(data_dir)
        overrides["discord"] = {"token": d.token, "rate_limit_per_minute": 1000, "max_concurrent_runs": 1000}
        settings = load_settings(env={}, overrides=overrides)
        service = await Service.create(settings)
        bot = HuggingGPTBot(service, settings, guild_ready_timeout=0.05, shutdown_grace=0.0)
        await bot.login(d.token)
        runner = asyncio.create_task(bot.connect())
        await asyncio.wait_for(bot.wait_until_ready(), 10)
        try:
            yield d, bot
        finally:
            await bot.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(runner, 5)
            await service.close()
            d.restore_client_urls(old)


async def burst(d: StandinDiscord, bot: HuggingGPTBot, n: int, prompt: str) -> list[float]:
    """Send ``n`` commands back to back; return each deferral latency in milliseconds."""
    payloads = [d.interaction_payload(prompt, user=d._user(d.snowflake(), f"user{i}")) for i in range(n)]
    for p in payloads:
        await d.send_interaction(p)
    ids = [int(p["id"]) for p in payloads]
    await d.wait_for(lambda: all(i in d.deferrals for i in ids), 30)
    await d.wait_for(lambda: bot.runs_in_flight == 0, 120)
    return [(d.deferrals[i] - d.injected[i]) * 1000 for i in ids]


async def deferral_latency(rounds: int, size: int, data_dir: Path) -> list[float]:
    out: list[float] = []
    async with stack(data_dir) as (d, bot):
        await burst(d, bot, 1, "Generate an image of a cat")  # warm-up
        for _ in range(rounds):
            out += await burst(d, bot, size, "Generate an image of a red rocket")
    return out


async def memory_per_thread(n: int, data_dir: Path) -> tuple[float, float]:
    """Traced bytes per active thread, and seconds until all ``n`` runs were in flight."""
    async with stack(data_dir, latency={"text-to-image": 120}) as (d, bot):
        await burst(d, bot, 1, "Make this photo black and white")  # warm-up (no slow task)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        t0 = time.monotonic()
        payloads = [d.interaction_payload("Generate an image of a cat", user=d._user(d.snowflake(), f"m{i}"))
                    for i in range(n)]
        for p in payloads:
            await d.send_interaction(p)

        def all_running() -> bool:
            threads = [int(t["id"]) for t in d.threads()]
            return sum(any("running" in m.content for m in d.bot_messages(t)) for t in threads) >= n

        await d.wait_for(all_running, 60)
        elapsed = time.monotonic() - t0
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert bot.runs_in_flight == n
        return (after - before) / n, elapsed


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per measurement (default 5)")
    ap.add_argument("--burst", type=int, default=50, help="simultaneous commands (default 50)")
    ap.add_argument("--active", type=int, default=50, help="threads in flight for the memory figure (default 50)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        single = await deferral_latency(args.rounds * 6, 1, Path(tmp) / "a")
        many = await deferral_latency(args.rounds, args.burst, Path(tmp) / "b")
        per_thread, ramp = await memory_per_thread(args.active, Path(tmp) / "c")
    for label, values in ((f"1 command ({len(single)} samples)", single),
                          (f"{args.burst} simultaneous ({len(many)} samples)", many)):
        print(f"deferral latency, {label}: p50 {statistics.median(values):.1f} ms, p99 {pct(values, 99):.1f} ms, "
              f"max {max(values):.1f} ms")
    print(f"memory per active thread ({args.active} in flight, tracemalloc, whole process): "
          f"{per_thread / 1024:.0f} KiB; all {args.active} running after {ramp:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
