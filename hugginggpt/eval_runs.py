"""``hugginggpt eval runs --requests FILE [--files DIR] [--limit N] [--concurrency N] [--out FILE]``:
end-to-end runs of a set of requests with files (passing and success rate, tasks ok, re-plans, LLM
calls and latency per request; :mod:`hugginggpt.evaluation.runs`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import add_sandbox_option, print_report

if TYPE_CHECKING:
    from bot.settings import Settings


def add_parser(benches: Any, positive: Any) -> None:
    """Add ``runs`` to ``eval``'s subparsers (``positive``: the whole-number argument type)."""
    r = benches.add_parser(
        "runs", help="end-to-end runs of requests with files through all four stages (passing rate, success rate, "
        "tasks ok, re-plans, LLM calls, latency)",
        description="Run each request of FILE through task planning, model selection, task execution and response "
        "generation against the configured backends, and report how each went.",
    )
    r.add_argument("--requests", required=True, metavar="FILE",
                   help='JSON lines {"id", "request", "files": [PATH | {"path", "name"}]} (TaskBench\'s '
                   '"user_request" also works; without "files", the file names in the request are attached)')
    r.add_argument("--files", metavar="DIR", help="the folder file paths are relative to (default: the requests file's)")
    r.add_argument("--limit", type=positive, metavar="N", help="run only the first N requests")
    r.add_argument("--concurrency", type=positive, default=1, metavar="N",
                   help="requests at a time (default 1, so latencies are not inflated by each other)")
    r.add_argument("--out", metavar="FILE", help="write the report as JSON to FILE and as Markdown next to it (FILE.md)")
    add_sandbox_option(r)
    r.set_defaults(handler=main)


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Run the requests and print the report's tables; returns 0, or 6 when a run did not pass.

    Raises:
        InputError: the requests file or a file it names is unusable, or the report cannot be
            written (exit status 3).
        ConfigError, StorageError: settings or storage unusable.
    """
    from pipeline.redact import host_of  # the service and its clients load when the runs start, not for --help

    from .evaluation.runs import build_report, load_cases, markdown, run_all
    from bot.incoming import Message
    from bot.service import Service

    cases = load_cases(Path(args.requests), Path(args.files) if args.files else None)[: args.limit]
    service = await Service.create(settings)
    done = 0

    def progress(result: Any) -> None:
        nonlocal done
        done += 1
        print(f"[{done}/{len(cases)}] {result.id}: {result.status}, {result.llm_calls} LLM calls, "
              f"{result.latency_s:.2f} s", file=sys.stderr)

    try:
        results = await run_all(lambda text, files: service.handle(Message(text, files)), cases,
                                concurrency=args.concurrency, progress=progress)
    finally:
        await service.close()
    meta = {
        "benchmark": "runs", "requests_file": str(args.requests),
        "controller": {"model": settings.llm.model, "host": host_of(settings.llm.base_url), "sandbox": bool(args.sandbox)},
        "max_replans": settings.planning.max_replans,
    }
    report = build_report(results, meta)
    print_report(report, markdown(report), args.out)
    return 0 if all(r.passed for r in results) else 6
