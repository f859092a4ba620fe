"""Scheduler benchmark (issue: "The four-stage pipeline"): ``python -m benchmarks.bench_pipeline``.

Over the sandbox stand-ins with a fixed latency per expert call, for five task graphs (single,
chain, fan-out, diamond, 20 tasks) it prints:

- execution wall time ÷ critical-path time (target ≤ 1.05). The critical path is the longest
  dependency path weighted by each task's own duration, from the moment its expert call starts to
  the moment its output is ready (``TaskResult.started/finished``): the least wall time any
  scheduler could reach with those tasks. A second column weights the path by the time each call
  spent at the stand-in instead (its fixed latency plus its own work, from the stand-in's request
  records), so it also charges HTTP and output post-processing (drawing boxes, overlaying masks);
- orchestration CPU per task (target < 2 ms): CPU time of the thread running the pipeline's event
  loop during task execution (scheduling, placeholder resolution, the HTTP client), divided by
  the number of tasks. The stand-ins run on their own event loop in another thread, and image
  drawing runs in worker threads, so neither is counted;
- LLM calls per request for real requests (the issue's three examples and TaskBench texts) with
  the ``llm`` selection strategy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bot.settings import load_settings
from sandbox import Sandbox
from bot.errors import InputError
from bot.incoming import IncomingFile, Message
from bot.service import Service
from pipeline.llm import Usage
from bot.store import LocalResourceSink
from bot.uploads import inspect_upload
from pipeline.planning import validate_plan
from pipeline.tasks import TASKS
from pipeline.types import Done, Request

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT / "tests" / "fixtures" / "media"


def graphs() -> dict[str, list[dict]]:
    t = lambda task, i, dep, **args: {"task": task, "id": i, "dep": dep or [-1], "args": args}  # noqa: E731
    twenty = []
    for r in range(4):
        b = r * 5
        twenty += [
            t("text-to-image", b, [], text=f"scene number {r} with a red boat"),
            t("object-detection", b + 1, [b], image=f"<resource>-{b}"),
            t("image-classification", b + 2, [b + 1], image=f"<resource>-{b + 1}"),
            t("image-to-text", b + 3, [b], image=f"<resource>-{b}"),
            t("text-to-speech", b + 4, [b + 3], text=f"<resource>-{b + 3}"),
        ]
    return {
        "single": [t("image-classification", 0, [], image="image-1")],
        "chain": [
            t("text-to-image", 0, [], text="a red bicycle"),
            t("image-to-text", 1, [0], image="<resource>-0"),
            t("text-to-speech", 2, [1], text="<resource>-1"),
        ],
        "fan-out": [t("text-to-image", 0, [], text="a lighthouse")]
        + [t(k, i + 1, [0], image="<resource>-0") for i, k in enumerate(
            ["image-to-text", "image-classification", "object-detection", "depth-estimation", "image-segmentation"])],
        "diamond": [
            t("text-to-image", 0, [], text="a green apple"),
            t("image-to-text", 1, [0], image="<resource>-0"),
            t("image-classification", 2, [0], image="<resource>-0"),
            t("text-to-speech", 3, [1, 2], text="<resource>-1, probably <resource>-2"),
        ],
        "20-task": twenty,
    }


def critical_path(tasks, durations: dict[int, float]) -> float:
    longest: dict[int, float] = {}
    for task in tasks:  # validated plans are in topological order
        longest[task.id] = durations[task.id] + max((longest[d] for d in task.dep), default=0.0)
    return max(longest.values())


class StandIns:
    """The sandbox on its own event loop in a background thread."""

    def __init__(self, latency: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        lat = {name: latency for name in TASKS}
        self.sandbox = asyncio.run_coroutine_threadsafe(Sandbox(latency=lat).start(), self.loop).result()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.sandbox.close(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)


async def bench_graphs(stand: StandIns, data_dir: Path, repeats: int) -> list[dict]:
    overrides = stand.sandbox.overrides(data_dir)
    overrides["inference"]["selection"] = "top"
    service = await Service.create(load_settings(env={}, overrides=overrides))
    pipeline = service.pipeline
    sink = LocalResourceSink(service.media)
    data = (MEDIA / "chelsea.png").read_bytes()
    limits = service.settings
    info = await inspect_upload(data, "chelsea.png", "image/png", max_bytes=25 << 20,
                                max_pixels=limits.inference.max_image_pixels,
                                max_text_bytes=limits.storage.max_text_file_bytes)
    photo = await sink.add(data, kind=info.kind, mime=info.mime, origin="user", description=info.description, name="chelsea.png")
    request = Request(text="benchmark", files=[photo])
    available = await pipeline.served_tasks()
    rows = []
    for name, raw in graphs().items():
        tasks = validate_plan(raw, available=available, resources=request.resources)
        ratios, server_ratios, cpus = [], [], []
        for _ in range(repeats):
            stand.sandbox.inference.records.clear()
            usage = Usage()
            c0, w0 = time.thread_time(), time.perf_counter()
            _, results = await pipeline.executor.execute(tasks, request, sink, lambda e: None, usage)
            wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
            assert all(r.status == "ok" for r in results.values()), {k: r.error for k, r in results.items()}
            records = list(stand.sandbox.inference.records)
            by_model_task = {}
            for rec in records:
                by_model_task.setdefault(rec.task, []).append(rec)
            # map each task to its stand-in record: the same task name in start order
            durations = {}
            for task in tasks:
                rec = by_model_task[task.task].pop(0) if by_model_task.get(task.task) else None
                durations[task.id] = (rec.end - rec.start) if rec else 0.0
            server_ratios.append(wall / critical_path(tasks, durations))
            own = {t.id: results[t.id].finished - results[t.id].started for t in tasks}
            ratios.append(wall / critical_path(tasks, own))
            cpus.append(cpu / len(tasks) * 1000)
        rows.append(
            {
                "graph": name,
                "tasks": len(tasks),
                "wall/critical": statistics.median(ratios),
                "wall/server_critical": statistics.median(server_ratios),
                "cpu_ms_per_task": statistics.median(cpus),
            }
        )
    await service.close()
    return rows


async def bench_llm_calls(stand: StandIns, data_dir: Path, n_taskbench: int) -> dict:
    service = await Service.create(load_settings(env={}, overrides=stand.sandbox.overrides(data_dir)))
    photo = IncomingFile((MEDIA / "chelsea.png").read_bytes(), name="example.jpg")
    speech = IncomingFile((MEDIA / "speech_cat_request.ogg").read_bytes(), name="example.wav")
    video = IncomingFile((MEDIA / "rocket_speech.mp4").read_bytes(), name="example.mp4")
    requests = [
        ("Describe this picture in as much detail as you can", [photo]),
        ("Generate an image of a cat on a red sofa, then tell me what breed it might be", []),
        ("Transcribe this and read it back in a different voice", [speech]),
    ]
    lines = (ROOT / "tests" / "fixtures" / "taskbench" / "data_huggingface_requests.jsonl").read_text().splitlines()
    for line in lines[:n_taskbench]:
        text = json.loads(line)["user_request"]
        files = [photo] if ".jpg" in text or ".png" in text else []
        files += [speech] if ".wav" in text or ".mp3" in text else []
        files += [video] if ".mp4" in text or ".avi" in text else []
        requests.append((text, files))
    calls, tasks, refused = [], [], 0
    for text, files in requests:
        try:
            async for e in service.handle(Message(text, files)):
                if isinstance(e, Done):
                    calls.append(e.record.llm_calls)
                    tasks.append(len(e.record.tasks))
        except InputError:  # names a file none of the attached ones stands for
            refused += 1
    await service.close()
    return {
        "requests": len(requests) - refused,
        "refused": refused,
        "llm_calls_mean": statistics.mean(calls),
        "llm_calls_max": max(calls),
        "tasks_mean": statistics.mean(tasks),
        "issue_examples": calls[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per expert call at the stand-in")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--taskbench", type=int, default=20, help="TaskBench requests for the LLM-call count")
    parser.add_argument("--e2e", action="store_true",
                        help="end to end: stand-ins in their own process, the real CLI per plan shape (benchmarks/bench_e2e.py)")
    parser.add_argument("--plan-seconds", type=float, default=1.0, help="--e2e: seconds the controller takes to write a plan")
    parser.add_argument("--conversations", type=int, default=1000, help="--e2e: conversations at once for the event-loop lag (0: skip)")
    parser.add_argument("--only", default="", help="--e2e: only the shapes whose name contains this (e.g. 'chain')")
    parser.add_argument("--code", default=str(ROOT), help="--e2e: the checkout whose `hugginggpt run` is timed (e.g. the main branch)")
    args = parser.parse_args()
    if args.e2e:
        from benchmarks import bench_e2e

        args.repeat = args.repeats
        bench_e2e.main(args)
        return
    stand = StandIns(args.latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = asyncio.run(bench_graphs(stand, Path(tmp), args.repeats))
            calls = asyncio.run(bench_llm_calls(stand, Path(tmp), args.taskbench))
    finally:
        stand.close()
    print(f"expert latency {args.latency:g} s, median of {args.repeats} runs")
    print(f"{'graph':10} {'tasks':>5} {'wall/critical':>14} {'wall/server-critical':>21} {'CPU ms/task':>12}")
    for r in rows:
        print(
            f"{r['graph']:10} {r['tasks']:>5} {r['wall/critical']:>14.3f} {r['wall/server_critical']:>21.3f}"
            f" {r['cpu_ms_per_task']:>12.2f}"
        )
    print(
        f"LLM calls per request ({calls['requests']} requests, {calls['refused']} refused, selection=llm): mean {calls['llm_calls_mean']:.2f}, "
        f"max {calls['llm_calls_max']}, issue examples {calls['issue_examples']}; mean tasks per plan {calls['tasks_mean']:.2f}"
    )


if __name__ == "__main__":
    main()
