"""Benchmark of the HTTP API (``hugginggpt serve``).

1. Time to first streamed byte: ``hugginggpt serve`` runs in its own process, pointed at the
   sandbox stand-in backends in a third process (the controller and the models are remote in
   production too; ``--inprocess`` runs them inside the server, as ``serve --sandbox`` does, so
   their CPU work competes with the HTTP layer); this process sends rounds of 50 simultaneous
   streaming chat completions and times the first body byte (the first SSE chunk) and the whole
   answer of each.
2. Overhead of the HTTP layer: in one process, the same requests run one at a time through
   ``Service.handle`` directly and through ``POST /v1/chat/completions`` (not streamed) on the same
   service; the difference of the medians is what HTTP, JSON, the content parts and the file links
   cost.

Targets: p99 time to first byte < 300 ms at 50 concurrent clients on the sandbox (issue 35, the
front end under load); < 100 ms (issue 12's earlier aim, printed beside it).

    python -m benchmarks.bench_server [--concurrency 50] [--rounds 4] [--sequential 40]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

MEDIA = ROOT / "tests" / "fixtures" / "media"
REQUESTS = ["Generate an image of a cat on a red sofa", "Detect the objects in this photo", "Caption this picture"]


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def row(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"| {label:<44} | {len(ms):>4} | {statistics.median(ms):8.1f} | {pct(ms, 99):8.1f} | {max(ms):8.1f} |"


def message(i: int) -> dict:
    text = REQUESTS[i % len(REQUESTS)]
    if i % len(REQUESTS) == 0:
        return {"role": "user", "content": text}
    photo = base64.b64encode((MEDIA / "camera.png").read_bytes()).decode()
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + photo}}]}


async def first_byte(session, url: str, i: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    body = {"model": "hugginggpt", "stream": True, "messages": [message(i)]}
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        await r.content.readany()
        ttfb = time.perf_counter() - t0
        await r.read()
    return ttfb, time.perf_counter() - t0


async def backends_main() -> int:
    """``--backends-only``: run the sandbox stand-ins, print their settings as environment
    variables (one ``NAME=value`` a line, then ``READY``), stop when stdin closes."""
    from sandbox import Sandbox

    async with Sandbox() as sb:
        o = sb.overrides()
        for section, values in o.items():
            for key, value in values.items():
                print(f"HUGGINGGPT_{section.upper()}__{key.upper()}={'' if value is None else value}")
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    return 0


async def concurrent_phase(concurrency: int, rounds: int, inprocess: bool) -> tuple[list[float], list[float]]:
    import aiohttp

    backends = None
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HUGGINGGPT_STORAGE__DATA_DIR": str(Path(tmp) / "data"), "PYTHONPATH": str(ROOT),
               "HUGGINGGPT_SERVER__RATE_LIMIT_PER_MINUTE": "0", "HUGGINGGPT_SERVER__MAX_CONCURRENT_RUNS": "1000"}
        argv = [sys.executable, "-m", "hugginggpt", "serve", "--port", "0"]
        if inprocess:
            argv.append("--sandbox")
        else:
            backends = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_server", "--backends-only"], cwd=ROOT,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for text in iter(backends.stdout.readline, "READY\n"):
                name, _, value = text.strip().partition("=")
                env[name] = value
        proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            m = re.search(r"(http://127\.0\.0\.1:\d+)/v1", proc.stdout.readline())
            assert m, "the server did not start"
            url = m.group(1)
            ttfbs: list[float] = []
            totals: list[float] = []
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                await asyncio.gather(*(first_byte(session, url, i) for i in range(6)))  # warm-up
                for _ in range(rounds):
                    results = await asyncio.gather(*(first_byte(session, url, i) for i in range(concurrency)))
                    ttfbs += [r[0] for r in results]
                    totals += [r[1] for r in results]
            return ttfbs, totals
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            if backends is not None:
                backends.stdin.close()
                backends.wait(timeout=30)


async def overhead_phase(n: int) -> tuple[list[float], list[float]]:
    import aiohttp

    from adapters.http.content import parse_messages
    from adapters.http.models import Message as ChatMessage
    from bot.incoming import ConversationKey, Message
    from sandbox import Sandbox
    from benchmarks.harness.http_server import Served

    with tempfile.TemporaryDirectory() as tmp:
        async with Sandbox() as sandbox:
            served = await Served(sandbox, Path(tmp) / "data", {"rate_limit_per_minute": 0}).start()
            service = served.service
            direct: list[float] = []
            http: list[float] = []
            try:
                async with aiohttp.ClientSession() as session:
                    for i in range(n + 3):
                        msg = message(i)
                        t0 = time.perf_counter()  # the service alone, with the same decoded input
                        turn = await parse_messages([ChatMessage.model_validate(msg)], allowed_hosts=[], max_file_bytes=1 << 26,
                                                    url_timeout=5, budget_tokens=1500)
                        files = await service.check_files(turn.files)
                        key = ConversationKey("bench", "w", "c", uuid.uuid4().hex)
                        async for _ in service.handle(Message(turn.text, files, key=key)):
                            pass
                        t1 = time.perf_counter()
                        async with session.post(served.url + "/v1/chat/completions",
                                                json={"model": "hugginggpt", "messages": [msg]}) as r:
                            r.raise_for_status()
                            await r.read()
                        t2 = time.perf_counter()
                        if i >= 3:  # warm-up
                            direct.append(t1 - t0)
                            http.append(t2 - t1)
            finally:
                await served.close()
    return direct, http


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sequential", type=int, default=40)
    ap.add_argument("--inprocess", action="store_true", help="stand-ins inside the server process (serve --sandbox)")
    ap.add_argument("--backends-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.backends_only:
        return await backends_main()
    ttfb, total = await concurrent_phase(args.concurrency, args.rounds, args.inprocess)
    direct, http = await overhead_phase(args.sequential)
    where = "inside the server process" if args.inprocess else "in their own process"
    print(f"HTTP API on the sandbox backends ({where}), {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"| {'measure':<44} | {'n':>4} | {'p50 ms':>8} | {'p99 ms':>8} | {'max ms':>8} |")
    print(f"|{'-' * 46}|{'-' * 6}|{'-' * 10}|{'-' * 10}|{'-' * 10}|")
    print(row(f"first streamed byte, {args.concurrency} concurrent", ttfb))
    print(row(f"whole streamed answer, {args.concurrency} concurrent", total))
    print(row("Service.handle directly, one at a time", direct))
    print(row("POST /v1/chat/completions, one at a time", http))
    diff = statistics.median(http) - statistics.median(direct)
    print(f"\nHTTP layer overhead (median difference): {diff * 1000:.1f} ms per request "
          f"({diff / statistics.median(direct) * 100:.1f} % of a run)")
    p99 = pct([v * 1000 for v in ttfb], 99)
    for target in (300, 100):
        print(f"target p99 first byte < {target} ms: {'met' if p99 < target else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
