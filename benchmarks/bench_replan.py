"""LLM calls per request before and after re-planning from the results:
``python -m benchmarks.bench_replan [--limit N]``.

Runs the real TaskBench requests of ``tests/fixtures/runs/requests.jsonl`` (with their files) end to
end through the service on the sandbox stand-ins (keyword planner, stand-in models), twice: with
``[planning] max_replans = 0`` (no re-planning step: the pipeline makes the calls it made before
the step existed) and with the default ``1``. It prints the mean LLM calls per request overall and
over the requests whose tasks all succeeded without re-planning (the issue's condition: that mean
must not rise), then the same with every image-to-text, object-detection and image-classification model gone, so that the re-planning
step actually runs (the sandbox controller's re-plan tries a neighbouring task for each failed one,
or answers from what exists: one call more, plus the new tasks' calls).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
from pathlib import Path

from hugginggpt.evaluation.runs import RunResult, load_cases, run_all
from sandbox import Sandbox
from bot.incoming import Message
from bot.service import Service
from bot.settings import load_settings
from pipeline.catalog.models import Catalog

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = ROOT / "tests" / "fixtures" / "runs" / "requests.jsonl"


async def _measure(limit: int | None, max_replans: int, gone_tasks: tuple[str, ...]) -> list[RunResult]:
    cases = load_cases(REQUESTS)[:limit]
    with tempfile.TemporaryDirectory() as tmp:
        async with Sandbox() as sandbox:
            catalog = Catalog.load(None)
            for task in gone_tasks:
                sandbox.inference.gone.update(m.id for m in catalog.candidates(task))
            overrides = sandbox.overrides(Path(tmp) / "data")
            overrides["planning"] = {"max_replans": max_replans}
            overrides["inference"]["max_candidates_tried"] = 2
            service = await Service.create(load_settings(env={}, overrides=overrides))
            try:
                return await run_all(lambda text, files: service.handle(Message(text, files)), cases)
            finally:
                await service.close()


def _mean(values: list[int]) -> str:
    return f"{statistics.fmean(values):.3f}" if values else "n/a"


def _report(title: str, before: list[RunResult], after: list[RunResult]) -> None:
    clean = {r.id for r in before if r.success and r.tasks_ok == r.tasks}
    print(f"\n{title}")
    print("| configuration | requests | LLM calls / request | LLM calls / all-success request | re-plans | success rate |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rs in (("max_replans = 0 (before)", before), ("max_replans = 1 (after)", after)):
        ok = [r.llm_calls for r in rs if r.id in clean]
        print(f"| {name} | {len(rs)} | {_mean([r.llm_calls for r in rs])} | {_mean(ok)} ({len(ok)} requests) "
              f"| {sum(r.replans for r in rs)} | {sum(r.success for r in rs) / max(1, len(rs)):.1%} |")
    changed = [(b.id, b.llm_calls, a.llm_calls) for b, a in zip(before, after) if b.id in clean and b.llm_calls != a.llm_calls]
    print(f"all-success requests whose LLM calls changed: {len(changed)} {changed if changed else ''}")


async def main(limit: int | None) -> None:
    logging.disable(logging.WARNING)  # the failures below are on purpose; keep the output to the figures
    gone = ("image-to-text", "object-detection", "image-classification")
    for title, tasks in (("All expert models served", ()), (f"Every model of {', '.join(gone)} gone", gone)):
        before = await _measure(limit, 0, tasks)
        after = await _measure(limit, 1, tasks)
        _report(title, before, after)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N requests")
    asyncio.run(main(parser.parse_args().limit))
