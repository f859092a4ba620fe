"""End-to-end speed benchmark (issue 9): ``python -m benchmarks.bench_pipeline --e2e``.

Stand-in servers run in their own process (:mod:`benchmarks.e2e_standins`: a controller that
streams each plan over ``--plan-seconds``, experts with a fixed latency per call) and the real
command line runs as a subprocess, ``hugginggpt run --json``, for six plan shapes; each multi-task
shape also with an attached photo, and each in an existing data directory and in a new one per run
(the store's schema is created then). Per shape, medians over ``--repeat`` runs:

- **first task**: seconds from the first plan byte to the first expert request, and how much earlier
  than the end of the plan stream that is (negative: tasks start only after the whole plan);
- **wall ÷ critical**: from plan start to the answer request, divided by the critical path with
  eager dispatch: a task can start once its record is fully streamed and its dependencies are
  done, and takes what the stand-in took for it (its fixed latency plus its own work); the answer
  can start when every task is done. A second column divides by the critical path without eager
  dispatch (the end of the plan plus the longest chain);
- **CPU ms/task**: CPU time of the command-line process during the run (``timings_ms.cpu`` of
  ``--json``: every thread, so image encoding and file writes count; for a product that does not
  report it, the whole child process's user+system time from ``getrusage(RUSAGE_CHILDREN)``) minus
  that of a run with an empty plan measured the same way, per task;
- **overhead ms/task**: (wall − eager critical path) ÷ tasks.

Then, in one process, 1,000 conversations at once through the service (each its own thread,
planning streamed over ``--plan-seconds``): the event loop's lag (how late a 10 ms timer wakes),
p99 and max, and memory per active conversation (resident set growth ÷ 1,000).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import run_on

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT
"""The checkout whose ``hugginggpt run`` is timed (``--code``: e.g. the main branch, for a before/after)."""
MEDIA = ROOT / "tests" / "fixtures" / "media"
LATENCY = {"automatic-speech-recognition": 0.3, "text-to-speech": 0.3}
"""Seconds per expert call by task (others: ``--latency``)."""


def _t(task: str, i: int, dep: list[int], **args: str) -> dict[str, Any]:
    return {"task": task, "id": i, "dep": dep or [-1], "args": args}


def shapes() -> dict[str, tuple[list[dict[str, Any]], list[Path]]]:
    """Plan shape → (plan, files attached with ``--file``)."""
    from benchmarks.bench_pipeline import graphs

    g = graphs()
    photo, speech = MEDIA / "chelsea.png", MEDIA / "speech_weather.wav"
    fan_out = [_t("text-to-image", 0, [], text="a lighthouse")] + [
        _t(k, i + 1, [0], image="<resource>-0") for i, k in enumerate(
            ["image-to-text", "image-classification", "object-detection", "depth-estimation", "image-segmentation",
             "image-to-image"])
    ]
    fan_out[-1]["args"]["text"] = "make it black and white"
    return {
        "single image": ([_t("image-classification", 0, [], image="image-1")], [photo]),
        "single audio": ([_t("automatic-speech-recognition", 0, [], audio="audio-1")], [speech]),
        "chain of 3": (g["chain"], []),
        "fan-out of 6": (fan_out, []),
        "diamond": (g["diamond"], []),
        "20 tasks": (g["20-task"], []),
    }


def variants(name: str, files: list[Path]) -> list[tuple[str, list[Path]]]:
    """A multi-task shape without and with an attached photo (the file is recorded before
    planning, so the first generated file is not the first file of the run); a single task as it
    is (its file is its input)."""
    if files:
        return [("", files)]
    return [("", []), (" + file", [MEDIA / "chelsea.png"])]


def with_file_task(plan: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """The plan of a ``" + file"`` variant: the shape plus one last task that reads the attached
    photo (``image-to-text`` on ``image-1``). A plan that leaves an attached file unused is refused
    and planned again (the product asks the controller to add a task for it), which the stand-in
    would answer with the same plan: a second plan that no critical path counts."""
    return [*plan, _t("image-to-text", len(plan), [], image="image-1")] if suffix else plan


def eager_critical(plan: list[dict[str, Any]], ready: dict[int, float], took: dict[int, float]) -> float:
    """Least time from plan start to the answer with eager dispatch.

    Args:
        plan: tasks in id order (dependencies point backwards).
        ready: task id → seconds from plan start when its record was fully streamed.
        took: task id → seconds its expert call takes.
    """
    finish: dict[int, float] = {}
    for t in plan:
        deps = [d for d in t["dep"] if d != -1]
        finish[t["id"]] = max([ready[t["id"]]] + [finish[d] for d in deps]) + took[t["id"]]
    return max(finish.values(), default=0.0)


def _http(base: str, path: str, body: dict | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def run_cli(urls: dict[str, str], data_dir: Path, files: list[Path]) -> tuple[dict[str, Any], float]:
    """One ``hugginggpt run --json`` against the stand-ins; returns (its document, CPU seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env.update({
        "HUGGINGGPT_LLM__BASE_URL": urls["controller"], "HUGGINGGPT_LLM__API_KEY": "bench",
        "HUGGINGGPT_LLM__MODEL": "bench", "HUGGINGGPT_INFERENCE__BASE_URL": urls["inference"],
        "HUGGINGGPT_INFERENCE__SELECTION": "top", "HUGGINGGPT_STORAGE__DATA_DIR": str(data_dir),
        "PYTHONPATH": str(CODE),
    })
    args = [sys.executable, "-m", "hugginggpt", "run", "--json", "benchmark request"]
    for f in files:
        args += ["--file", str(f)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300,
                       cwd=data_dir if data_dir.is_dir() else data_dir.parent)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise SystemExit(f"the command failed ({p.returncode}): {p.stderr[-2000:]}") from None
    if "cpu" in doc["timings_ms"]:
        return doc, doc["timings_ms"]["cpu"] / 1000
    # a product without timings_ms.cpu (before it measured it): the whole process, start-up and
    # imports included, which the empty-plan baseline (measured the same way) takes away again
    return doc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure_shape(urls: dict[str, str], plan: list[dict[str, Any]], files: list[Path], plan_seconds: float,
                  repeat: int, data_dir: Path, baseline_cpu: float, new_dir: bool = False) -> dict[str, float]:
    """Medians over ``repeat`` runs of one shape (see the module's docstring); ``new_dir``: each
    run in a data directory of its own that does not exist yet (else all in ``data_dir``)."""
    rows: dict[str, list[float]] = {k: [] for k in ("first", "earlier", "ratio", "ratio_lazy", "cpu", "overhead")}
    for i in range(repeat):
        _http(urls["base"], "/_reset", {"plan": plan, "plan_seconds": plan_seconds})
        run_dir = data_dir
        if new_dir:  # a data directory that does not exist yet, in a folder of its own
            run_dir = data_dir / f"new-{len(list(data_dir.glob('new-*')))}" / "data"
            run_dir.parent.mkdir(parents=True)
        doc, cpu = run_cli(urls, run_dir, files)
        bad = {k: r["error"] for k, r in doc["results"].items() if r["status"] != "ok"}
        if bad or doc["status"] != "ok":
            raise SystemExit(f"a task failed: {bad or doc.get('error')}")
        rec = _http(urls["base"], "/_records")
        t0 = rec["plan_start"]
        experts = sorted(rec["experts"], key=lambda e: e["start"])
        by_task: dict[str, list[dict[str, Any]]] = {}
        for e in experts:
            by_task.setdefault(e["task"], []).append(e)
        took = {}
        for t in plan:
            call = by_task[t["task"]].pop(0) if by_task.get(t["task"]) else None
            took[t["id"]] = (call["end"] - call["start"]) if call else 0.0
        ready = {t["id"]: rec["record_end"][str(t["id"])] - t0 for t in plan}
        critical = eager_critical(plan, ready, took)
        lazy = eager_critical(plan, {k: rec["plan_end"] - t0 for k in ready}, took)
        wall = rec["answers"][0] - t0
        rows["first"].append(experts[0]["start"] - rec["first_byte"])
        rows["earlier"].append(rec["plan_end"] - experts[0]["start"])
        rows["ratio"].append(wall / critical)
        rows["ratio_lazy"].append(wall / lazy)
        rows["cpu"].append((cpu - baseline_cpu) * 1000 / len(plan))
        rows["overhead"].append((wall - critical) * 1000 / len(plan))
    return {k: statistics.median(v) for k, v in rows.items()}


async def stand_in_service(urls: dict[str, str], data_dir: Path, plan: list, plan_seconds: float) -> Any:
    """The real service on the stand-ins, their controller reset to answer ``plan`` after ``plan_seconds``."""
    from bot.service import Service
    from bot.settings import load_settings

    _http(urls["base"], "/_reset", {"plan": plan, "plan_seconds": plan_seconds, "answer_seconds": 1.0})
    overrides = {
        "llm": {"base_url": urls["controller"], "api_key": "bench", "model": "bench", "max_retries": 0},
        "inference": {"base_url": urls["inference"], "provider": None, "token": None, "selection": "top"},
        "storage": {"data_dir": str(data_dir)},
    }
    return await Service.create(load_settings(env={}, overrides=overrides))


async def one_conversation(service: Any, i: int) -> None:
    """One turn of conversation ``i`` (its own thread; 50 users share the conversations)."""
    from bot.incoming import ConversationKey, Message, Requester

    key = ConversationKey("bench", "w", "c", f"thread-{i}")
    async for _ in service.handle(Message(f"hello number {i}", key=key, who=Requester("terminal", f"u{i % 50}"))):
        pass


async def tick(done: asyncio.Event, lags: list[float]) -> None:
    """Sleep 10 ms at a time until ``done``, adding each wake-up's lateness (seconds) to ``lags``."""
    while not done.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append(time.perf_counter() - t - 0.01)


async def loop_lag(urls: dict[str, str], data_dir: Path, conversations: int, plan_seconds: float) -> dict[str, float]:
    """Event-loop lag and memory with ``conversations`` runs in flight in this process."""
    service = await stand_in_service(urls, data_dir, [], plan_seconds)
    lags: list[float] = []
    done = asyncio.Event()

    async def one(i: int) -> None:
        await one_conversation(service, i)

    def rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    try:
        await one(-1)  # warm: imports, database, HTTP pool
        before = rss()
        ticking = asyncio.create_task(tick(done, lags))
        runs = [asyncio.create_task(one(i)) for i in range(conversations)]
        await asyncio.sleep(plan_seconds * 0.8)
        peak = rss()
        await asyncio.gather(*runs)
        done.set()
        await ticking
    finally:
        await service.close()
    lags.sort()
    return {
        "p99_ms": lags[int(len(lags) * 0.99) - 1] * 1000 if lags else 0.0,
        "max_ms": lags[-1] * 1000 if lags else 0.0,
        "kib_per_conversation": (peak - before) / conversations / 1024,
    }


def main(args: Any) -> None:
    global CODE
    CODE = Path(args.code).resolve()
    print(f"code: {CODE}")
    latency = {**{name: args.latency for name in _task_names()}, **LATENCY}
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.e2e_standins", "--latency", json.dumps(latency)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        urls = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp)
            base_cpu = []
            for _ in range(args.repeat):
                _http(urls["base"], "/_reset", {"plan": [], "plan_seconds": args.plan_seconds})
                base_cpu.append(run_cli(urls, data_dir, [])[1])
            baseline = statistics.median(base_cpu)
            print(f"plan streamed over {args.plan_seconds:g} s; expert latency {args.latency:g} s "
                  f"(speech tasks 0.3 s); median of {args.repeat} runs; CPU of an empty-plan run {baseline * 1000:.0f} ms\n")
            print("| shape | data dir | tasks | plan byte → first expert (s) | earlier than plan end (s) | wall ÷ critical (eager) "
                  "| wall ÷ critical (whole plan first) | CPU ms/task | overhead ms/task |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
            worst = 0.0
            for name, (plan, shape_files) in shapes().items():
                if getattr(args, "only", "") and not any(w in name for w in args.only.split(",")):
                    continue
                for suffix, files in variants(name, shape_files):
                    tasks = with_file_task(plan, suffix)
                    for new_dir in (False, True):
                        m = measure_shape(urls, tasks, files, args.plan_seconds, args.repeat, data_dir, baseline, new_dir)
                        worst = max(worst, m["ratio"])
                        print(f"| {name}{suffix} | {'new' if new_dir else 'existing'} | {len(tasks)} | {m['first']:.3f} | "
                              f"{m['earlier']:+.3f} | {m['ratio']:.3f} | {m['ratio_lazy']:.3f} | {m['cpu']:.1f} | "
                              f"{m['overhead']:.1f} |", flush=True)
            print(f"\nworst wall ÷ critical (eager): {worst:.3f} (target ≤ 1.03)")
            if args.conversations <= 0:
                return
            lag = run_on("program", loop_lag(urls, data_dir / "lag", args.conversations, args.plan_seconds))
            print(f"\n{args.conversations} conversations at once in one process: event-loop lag p99 "
                  f"{lag['p99_ms']:.1f} ms (max {lag['max_ms']:.1f} ms), {lag['kib_per_conversation']:.0f} KiB per active conversation")
    finally:
        proc.terminate()
        proc.wait(10)


def _task_names() -> list[str]:
    from pipeline.tasks import TASKS

    return list(TASKS)
