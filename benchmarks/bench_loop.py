"""Event-loop CPU per request, by stage (issue 35, "a light loop"): ``python -m benchmarks.bench_loop``.

The stand-ins of the end-to-end benchmark run in their own process (:mod:`benchmarks.e2e_standins`:
a controller streaming each plan over ``--plan-seconds``, experts with no added latency); in this
process ``--conversations`` runs at once go through the real ``Service`` on one event loop, after
two warm-up runs. It prints:

- the loop thread's CPU per conversation (``time.thread_time`` of the loop thread: the stand-ins,
  worker threads and the store's writer thread are not counted) and the loop lag (how late a
  10 ms timer wakes), p99 and max, in a run without a profiler, and the garbage collector's pauses
  in that run (all of them, and the longest: a collection stops the loop);
- then the same run under ``cProfile`` (loop thread only), and the cumulative time of each stage's
  functions per conversation. A profiler slows Python code about 2–4×, so read the stage figures
  against each other, not as absolute times; stages overlap where one calls another.

The runs are on the program's event loop (:func:`hugginggpt.common.loop_factory`: uvloop where it is
installed); ``--loop asyncio`` runs them on the standard library's loop instead, for a comparison.
``--plan`` chooses what the controller plans: ``none`` (planning and the answer only) or ``chain``
(text-to-image, then image-to-text and image-classification on its output: expert calls and a
generated file). ``--expert-calls N`` prints instead the loop CPU of ``N`` expert calls alone, beside
a bare aiohttp POST of the same bytes (their floor).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import run_on
from benchmarks.bench_e2e import one_conversation, stand_in_service, tick

ROOT = Path(__file__).resolve().parent.parent
PLANS = {
    "none": [],
    "chain": [
        {"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a red bicycle"}},
        {"task": "image-to-text", "id": 1, "dep": [0], "args": {"image": "<resource>-0"}},
        {"task": "image-classification", "id": 2, "dep": [0], "args": {"image": "<resource>-0"}},
    ],
}
STAGES = {
    "controller call built (SDK request, body)": [("openai/_utils/_transform.py", "async_maybe_transform"),
                                                  ("openai/_base_client.py", "_build_request")],
    "prompt messages": [("pipeline/planning.py", "planning_messages"), ("pipeline/response.py", "response_messages")],
    "controller request sent, head read": [("httpcore2/_async/connection_pool.py", "handle_async_request")],
    "streamed body → text deltas": [("pipeline/llm.py", "content_deltas")],
    "plan parsed as it streams (deltas included)": [("pipeline/planning.py", "_early_tasks")],
    "expert calls (files saved included)": [("pipeline/experts/hub.py", "run")],
    "media files written": [("bot/store/media.py", "put")],
    "store: turn opened, turn stored": [("bot/service.py", "_open_turn"), ("bot/service.py", "_stored_turn")],
    "connection liveness probes (getpeername)": [("~", "<method 'getpeername' of '_socket.socket' objects>")],
    "new TCP connections": [("~", "<method 'connect' of '_socket.socket' objects>")],
    "Hugging Face token looked up (get_token)": [("huggingface_hub/utils/_auth.py", "get_token")],
}


async def conversations(urls: dict[str, str], data_dir: Path, n: int, plan: list, plan_seconds: float,
                        profile: cProfile.Profile | None) -> dict[str, float]:
    """``n`` conversations at once; returns loop CPU per conversation (ms) and lag p99/max (ms)."""
    service = await stand_in_service(urls, data_dir, plan, plan_seconds)
    lags: list[float] = []
    done = asyncio.Event()

    async def one(i: int) -> None:
        await one_conversation(service, i)

    pauses: list[tuple[float, float]] = []  # (wall, CPU) seconds of each garbage collection during the run
    began = [0.0, 0.0]

    def collected(phase: str, _info: dict) -> None:
        if phase == "start":
            began[:] = [time.perf_counter(), time.thread_time()]
        else:
            pauses.append((time.perf_counter() - began[0], time.thread_time() - began[1]))

    try:
        await one(-1)
        await one(-2)  # warm: imports, database, connection pools
        c0 = time.thread_time()
        if profile is not None:
            profile.enable()
        gc.callbacks.append(collected)
        ticking = asyncio.create_task(tick(done, lags))
        await asyncio.gather(*(one(i) for i in range(n)))
        done.set()
        await ticking
        gc.callbacks.remove(collected)
        if profile is not None:
            profile.disable()
        cpu = time.thread_time() - c0
    finally:
        await service.close()
    lags.sort()
    return {"cpu_ms": cpu / n * 1000, "p99_ms": lags[int(len(lags) * 0.99) - 1] * 1000, "max_ms": lags[-1] * 1000,
            "gc_max_ms": max((w for w, _ in pauses), default=0.0) * 1000, "gc_ms": sum(w for w, _ in pauses) * 1000,
            "gc_max_cpu_ms": max((c for _, c in pauses), default=0.0) * 1000}


async def per_expert_call(urls: dict[str, str], data_dir: Path, n: int) -> dict[str, float]:
    """Loop CPU (ms) per expert call, ``n`` calls 100 at a time: ``HubRunner.run`` of
    image-classification on a 64x64 PNG, and a bare ``aiohttp`` POST of the same bytes to the same
    stand-in (the floor: the bytes on one keep-alive pool, the reply read and parsed)."""
    import aiohttp
    from PIL import Image

    from bot.backends import pipeline_config
    from bot.settings import load_settings
    from pipeline.experts.hub import HubRunner
    from pipeline.types import Resource

    data_dir.mkdir(parents=True)
    photo = data_dir / "photo.png"
    Image.new("RGB", (64, 64), (200, 20, 20)).save(photo)
    image = Resource("image-1", "image", photo, "image/png", photo.stat().st_size)
    model = "google/vit-base-patch16-224"
    url = f"{urls['inference'].rstrip('/')}/models/{model}"
    hub = HubRunner(pipeline_config(load_settings(env={}, overrides={"inference": {
        "base_url": urls["inference"], "provider": None, "token": None}, "storage": {"data_dir": str(data_dir)}})))
    gate = asyncio.Semaphore(100)

    async def timed(call: Any) -> float:
        async def one(i: int) -> None:
            async with gate:
                await call(i)
        await asyncio.gather(*(one(i) for i in range(20)))  # warm: connections, imports
        c0 = time.thread_time()
        await asyncio.gather(*(one(i) for i in range(n)))
        return (time.thread_time() - c0) / n * 1000

    async def bare(session: aiohttp.ClientSession, _i: int) -> None:
        async with session.post(url, data=photo.read_bytes(), headers={"content-type": "image/png"}) as r:
            json.loads(await r.read())

    try:
        hub_ms = await timed(lambda i: hub.run("image-classification", model, {"image": image}, None, task_id=i))
        async with aiohttp.ClientSession() as session:
            floor_ms = await timed(functools.partial(bare, session))
    finally:
        await hub.aclose()
    return {"hub_ms": hub_ms, "floor_ms": floor_ms}


def stage_rows(profile: cProfile.Profile, n: int) -> list[tuple[str, float, float]]:
    """``(stage, cumulative ms per conversation, calls per conversation)`` from a profile."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = []
    for stage, functions in STAGES.items():
        ms = calls = 0.0
        for (file, _line, name), (_cc, nc, _tt, ct, _callers) in stats.items():
            if any(file.replace(os.sep, "/").endswith(f) and name == fn for f, fn in functions):
                ms, calls = ms + ct * 1000, calls + nc
        rows.append((stage, ms / n, calls / n))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--plan", choices=sorted(PLANS), default="none")
    parser.add_argument("--plan-seconds", type=float, default=1.0)
    parser.add_argument("--standins-nice", type=int, default=0,
                        help="run the stand-ins at this niceness (19: they take a core only when the loop's "
                             "process does not want it, as experts on other machines would)")
    parser.add_argument("--loop", choices=("program", "asyncio"), default="program",
                        help="the event loop: the program's (uvloop where installed) or the standard library's")
    parser.add_argument("--expert-calls", type=int, default=0,
                        help="instead: the loop CPU of this many expert calls, against a bare aiohttp POST")
    args = parser.parse_args()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.e2e_standins", "--latency", "{}"], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            preexec_fn=(lambda: os.nice(args.standins_nice)) if args.standins_nice else None)
    try:
        urls = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        plan, n = PLANS[args.plan], args.conversations
        if args.expert_calls:
            with tempfile.TemporaryDirectory() as tmp:
                calls = run_on(args.loop, per_expert_call(urls, Path(tmp) / "calls", args.expert_calls))
            print(f"{args.expert_calls} expert calls, 100 at a time: loop CPU {calls['hub_ms']:.2f} ms per call "
                  f"(HubRunner.run); a bare aiohttp POST of the same bytes {calls['floor_ms']:.2f} ms")
            return
        with tempfile.TemporaryDirectory() as tmp:
            plain = run_on(args.loop, conversations(urls, Path(tmp) / "a", n, plan, args.plan_seconds, None))
            profile = cProfile.Profile()
            run_on(args.loop, conversations(urls, Path(tmp) / "b", n, plan, args.plan_seconds, profile))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"{n} conversations at once, plan {args.plan!r}, {os.cpu_count()} CPUs, {args.loop} loop: "
          f"loop CPU {plain['cpu_ms']:.1f} ms per conversation; "
          f"loop lag p99 {plain['p99_ms']:.1f} ms (max {plain['max_ms']:.1f} ms); "
          f"target p99 < 20 ms at 100: {'met' if plain['p99_ms'] < 20 else 'NOT met'}; garbage collection "
          f"{plain['gc_ms']:.0f} ms in all, longest pause {plain['gc_max_ms']:.1f} ms "
          f"({plain['gc_max_cpu_ms']:.1f} ms of CPU at most: the rest is waiting for a core)")
    print("\n| stage (under cProfile) | ms per conversation | calls per conversation |\n|---|---:|---:|")
    for stage, ms, calls in stage_rows(profile, n):
        print(f"| {stage} | {ms:.2f} | {calls:.1f} |")


if __name__ == "__main__":
    main()
