"""End-to-end runs of a set of requests with files, through all four stages against the configured
backends (``hugginggpt eval runs``).

HuggingGPT's own evaluation (Shen et al., NeurIPS 2023, §4.3) reports a *passing rate* (the plan
could be executed) and a *success rate* (the run did what was asked). Here a run *passes* when it
ends with an answer after a valid plan (status ``ok`` or ``partial``) and *succeeds* when every
task it settled on succeeded (status ``ok``; a failure the controller re-planned around counts as
settled, :func:`pipeline.replanning.unsettled`). Judging whether the answer is right needs a
person or a judge model: it is not measured here.

The requests file is JSON lines: ``{"id"?, "request" (or TaskBench's "user_request"), "files"?}``
where ``files`` lists paths relative to the files folder, or ``{"path", "name"}`` to attach a file
under another name (TaskBench's requests name ``example.jpg``). Without ``files``, the file names
the request mentions are looked up in the files folder.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import HuggingGPTError
from pipeline.types import Done, RunRecord

from bot.errors import InputError
from bot.incoming import IncomingFile

from .taskbench import json_lines

_FILE_NAME = re.compile(r"\b[\w.-]+\.(?:jpe?g|png|gif|webp|bmp|wav|mp3|flac|ogg|m4a|mp4|mov|webm|avi|txt)\b", re.I)


@dataclass
class RunCase:
    """One request of the set: its text and the files attached to it (path, name shown)."""

    id: str
    request: str
    files: list[tuple[Path, str]] = field(default_factory=list)


@dataclass
class RunResult:
    """How one request went.

    Attributes:
        id: the case's id.
        status: the run's status (``ok``, ``partial``, ``error``), or ``refused`` when the service
            refused the input before the pipeline started.
        passed: an answer after a valid plan (``ok`` or ``partial``).
        success: every task the run settled on succeeded (``ok``).
        tasks, tasks_ok: tasks run (every round) and those that succeeded.
        replans: re-planning rounds asked (the rounds after the first).
        llm_calls: controller calls; latency_s: seconds from the request to the answer's end.
        deadline_passed: the run's deadline cut it.
        error: the user's sentence when it failed.
    """

    id: str
    status: str
    passed: bool
    success: bool
    tasks: int = 0
    tasks_ok: int = 0
    replans: int = 0
    llm_calls: int = 0
    latency_s: float = 0.0
    deadline_passed: bool = False
    error: str | None = None


def load_cases(path: Path, files_dir: Path | None = None) -> list[RunCase]:
    """Read a requests file (see the module docstring).

    Args:
        path: the JSON-lines file.
        files_dir: where files are looked up (default: the requests file's folder).

    Raises:
        InputError: the file is missing or unreadable, a line is not a request, or a file it names
            does not exist (the sentence names the line).
    """
    folder = files_dir or path.parent
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"The requests file {path} cannot be read ({e.__class__.__name__}).") from None
    cases = []
    for n, raw in json_lines(content, lambda n: f"Line {n} of {path} is not JSON."):
        text = raw.get("request") or raw.get("user_request") if isinstance(raw, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise InputError(f'Line {n} of {path} has no "request" text.')
        entries = raw.get("files")
        if entries is None:
            entries = list(dict.fromkeys(m.group(0) for m in _FILE_NAME.finditer(text)))
        cases.append(RunCase(str(raw.get("id", n)), text, [_file(folder, e, n, path) for e in entries]))
    return cases


def _file(folder: Path, entry: Any, line: int, path: Path) -> tuple[Path, str]:
    if isinstance(entry, dict):
        rel, name = entry.get("path"), entry.get("name")
    else:
        rel, name = entry, None
    if not isinstance(rel, str) or not rel:
        raise InputError(f"Line {line} of {path} lists a file without a path.")
    file = folder / rel
    if not file.is_file():
        raise InputError(f"Line {line} of {path} names {rel}, which is not a file in {folder}.")
    return file, str(name or Path(rel).name)


def result_of(case: RunCase, record: RunRecord, latency_s: float) -> RunResult:
    """A finished run's figures (:class:`RunResult`)."""
    ok = sum(1 for r in record.results.values() if r.status == "ok")
    return RunResult(
        id=case.id, status=record.status, passed=record.answered, success=record.status == "ok",
        tasks=len(record.tasks), tasks_ok=ok, replans=max(0, len(record.rounds) - 1), llm_calls=record.llm_calls,
        latency_s=round(latency_s, 3), deadline_passed=record.deadline_passed, error=record.error,
    )


Handle = Callable[[str, Sequence[IncomingFile]], Any]
"""``Service.handle``-shaped: text and files in, pipeline events out (an async iterator)."""


async def run_case(handle: Handle, case: RunCase) -> RunResult:
    """Run one case through the service as a one-off request; a refused input is a result too."""
    t0 = time.monotonic()
    try:
        files = [IncomingFile(p.read_bytes(), name=name) for p, name in case.files]
        record = None
        async for event in handle(case.request, files):
            if isinstance(event, Done):
                record = event.record
    except (HuggingGPTError, OSError) as e:
        sentence = getattr(e, "user_message", None) or f"{e.__class__.__name__}: {e}"
        return RunResult(case.id, "refused", False, False, latency_s=round(time.monotonic() - t0, 3), error=sentence)
    if record is None:  # the pipeline always ends with Done; never count a run without one as passed
        return RunResult(case.id, "error", False, False, error="The run ended without a record.")
    return result_of(case, record, time.monotonic() - t0)


async def run_all(handle: Handle, cases: Sequence[RunCase], *, concurrency: int = 1,
                  progress: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """Run every case, ``concurrency`` at a time; results in the cases' order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(case: RunCase) -> RunResult:
        async with gate:
            result = await run_case(handle, case)
        if progress is not None:
            progress(result)
        return result

    return list(await asyncio.gather(*(one(c) for c in cases)))


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def build_report(results: Sequence[RunResult], meta: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: rates, task counts, re-plans, LLM calls and latency, and every request.

    Returns:
        ``{**meta, "requests", "passing_rate", "success_rate", "tasks", "tasks_ok", "replans",
        "runs_replanned", "llm_calls": {"mean", "mean_all_ok"}, "latency_s": {"mean", "median",
        "p90"}, "deadline_passed", "statuses", "runs": [...]}``; rates in [0, 1].
    """
    n = len(results)
    latencies = [r.latency_s for r in results]
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    all_ok = [r.llm_calls for r in results if r.success and r.replans == 0]
    return {
        **meta,
        "requests": n,
        "passing_rate": round(sum(r.passed for r in results) / n, 4) if n else 0.0,
        "success_rate": round(sum(r.success for r in results) / n, 4) if n else 0.0,
        "tasks": sum(r.tasks for r in results),
        "tasks_ok": sum(r.tasks_ok for r in results),
        "replans": sum(r.replans for r in results),
        "runs_replanned": sum(1 for r in results if r.replans),
        "llm_calls": {"mean": _mean([r.llm_calls for r in results]), "mean_all_ok": _mean(all_ok)},
        "latency_s": {"mean": _mean(latencies), "median": _quantile(latencies, 0.5), "p90": _quantile(latencies, 0.9)},
        "deadline_passed": sum(r.deadline_passed for r in results),
        "statuses": statuses,
        "runs": [asdict(r) for r in results],
    }


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: one summary table, then one row per request."""
    calls, lat = report["llm_calls"], report["latency_s"]
    lines = [
        "| requests | passing rate | success rate | tasks ok | re-plans (runs) | LLM calls / request "
        "| LLM calls / all-ok request | latency mean | median | p90 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {report['requests']} | {report['passing_rate']:.1%} | {report['success_rate']:.1%} "
        f"| {report['tasks_ok']}/{report['tasks']} | {report['replans']} ({report['runs_replanned']}) "
        f"| {_num(calls['mean'])} | {_num(calls['mean_all_ok'])} | {_s(lat['mean'])} | {_s(lat['median'])} | {_s(lat['p90'])} |",
        "",
        "| id | status | tasks ok | re-plans | LLM calls | latency | error |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in report["runs"]:
        error = (r["error"] or "").replace("|", "\\|").replace("\n", " ")[:120]
        lines.append(f"| {r['id']} | {r['status']} | {r['tasks_ok']}/{r['tasks']} | {r['replans']} | {r['llm_calls']} "
                     f"| {_s(r['latency_s'])} | {error} |")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"
