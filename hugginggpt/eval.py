"""The ``eval`` command and its three benchmarks:

* ``hugginggpt eval taskbench --data FILE [--tools huggingface|multimedia|FILE] [--limit N]
  [--concurrency N] [--out FILE] [--resume]``: the planning benchmark (TaskBench's metrics for the
  configured controller with our prompts);
* ``hugginggpt eval runs --requests FILE [--files DIR] [--limit N] [--concurrency N] [--out FILE]``:
  end-to-end runs of a set of requests with files (passing and success rate, tasks ok, re-plans,
  LLM calls and latency per request; :mod:`hugginggpt.evaluation.runs`);
* ``hugginggpt eval plans FILE [--json]``: recorded plans through normalisation and validation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.errors import InputError

from .common import add_sandbox_option, print_report
from .evaluation import toollist

if TYPE_CHECKING:
    from bot.settings import Settings

    from .evaluation.runner import Outcome


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def add_parser(subparsers: Any) -> None:
    """Add ``eval`` to the command line's subparsers."""
    p = subparsers.add_parser("eval", help="measure task planning (TaskBench) and whole runs (requests with files)")
    benches = p.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    t = benches.add_parser(
        "taskbench", help="TaskBench's planning metrics (node, t-, v- and link F1, edit distance, ROUGE) for the configured controller",
        description="Send TaskBench requests through task planning (our prompts, validation and repair round) "
        "and compare each plan with TaskBench's gold tool graph.",
    )
    t.add_argument("--data", required=True, metavar="FILE", help="TaskBench's data.json (JSON lines with user_request, tool_nodes)")
    t.add_argument(
        "--tools", type=toollist.argument, metavar="huggingface|multimedia|FILE",
        help="the tool list to score against: TaskBench's Hugging Face (default) or multimedia tools, "
        "or a tool_desc.json file; never guessed from the data's folder",
    )
    t.add_argument("--limit", type=_positive, metavar="N", help="evaluate only the first N requests")
    t.add_argument("--concurrency", type=_positive, default=4, metavar="N", help="planning calls at a time (default 4)")
    t.add_argument("--out", metavar="FILE", help="write the report as JSON to FILE and as Markdown next to it (FILE.md)")
    t.add_argument("--resume", action="store_true",
                   help="reuse plans already made for these requests with this prompt and model (after an interruption, or to re-score)")
    add_sandbox_option(t)
    t.set_defaults(handler=main)
    add_runs_parser(benches, _positive)
    add_plans_parser(benches)
    p.set_defaults(handler=_usage, parser=p)


def add_plans_parser(benches: Any) -> None:
    """Add ``plans`` to ``eval``'s subparsers."""
    q = benches.add_parser(
        "plans", help="recorded plans through plan normalisation and validation, nothing run (accepted as is, "
        "normalised, sent to repair, refused)",
        description="Read each recorded plan of FILE (TaskBench's prediction lines {\"id\", \"user_request\", "
        "\"result\": {\"task_nodes\", \"task_links\"}}; the files the request names count as attached) and count "
        "how it ends: accepted as is, accepted after normalisation (by rule), sent to the repair round (and "
        "repaired, when the line holds a \"repair\" answer), refused (by reason).",
    )
    q.add_argument("file", metavar="FILE", help="JSON lines of recorded plans")
    q.add_argument("--json", action="store_true", help="print the counts as one JSON document")
    q.set_defaults(handler=plans_main)


async def plans_main(args: argparse.Namespace, settings: Settings) -> int:
    """Count how the recorded plans of ``args.file`` end (:mod:`hugginggpt.evaluation.plans`); returns 0.

    Raises:
        InputError: the file cannot be read within the file limits, or a line is not a recorded
            plan (exit status 3).
    """
    import json

    from pipeline.tasks import TASKS

    from .evaluation.plans import evaluate, load_plans, summary, text_report
    from adapters.terminal.files import read_user_file

    data = (await read_user_file(args.file, settings)).data.decode("utf-8", errors="replace")
    report = summary([evaluate(case, frozenset(TASKS)) for case in load_plans(data)])
    print(json.dumps(report, indent=2) if args.json else text_report(report))
    return 0


async def _usage(args: argparse.Namespace, settings: Settings) -> int:
    args.parser.print_help(sys.stderr)
    return 2


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Run the benchmark and print its table; returns 0, or 4 when some requests failed at the
    controller (the report still covers the others).

    Raises:
        InputError: the data file or the ``--tools`` file is missing or not TaskBench's format
            (exit status 3).
        ConfigError: no controller API key (exit status 2).
        ControllerError: the controller failed five times in a row (exit status 4).
    """
    from tqdm import tqdm  # the planner and its clients load when the benchmark runs, not for --help

    from pipeline.redact import host_of
    from pipeline.tasks import TASKS

    from bot.backends import build_controller
    from .evaluation.report import build_report
    from .evaluation.runner import PlanCache, plan_all, prompt_version
    from .evaluation.taskbench import load_records

    data = Path(args.data)
    tools = toollist.resolve(args.tools or toollist.DEFAULT)
    records = load_records(data, tools)[: args.limit]
    warning = toollist.suggestion(tools, [n for r in records for n in r.graph.nodes])
    if warning:
        print(warning, file=sys.stderr)
    available = frozenset(TASKS)
    controller = build_controller(settings)
    # The sandbox's stand-in is free and changes with the code: never cache it.
    cache = PlanCache(None if args.sandbox else settings.storage.data_dir / "eval" / "taskbench-plans.jsonl")
    if args.resume and not args.sandbox and not len(cache):
        raise InputError("There is nothing to resume: no plans were cached yet (run without --resume first).")
    bar = tqdm(total=len(records), unit="request", file=sys.stderr, disable=None, desc="task planning")

    def progress(outcome: Outcome) -> None:
        bar.update(1)

    try:
        outcomes = await plan_all(
            controller, records, available, cache=cache, reuse=args.resume, concurrency=args.concurrency, progress=progress
        )
    finally:
        bar.close()
        await controller.aclose()
    meta = {
        "benchmark": "taskbench",
        "data": str(data),
        "controller": {"model": settings.llm.model, "host": host_of(settings.llm.base_url), "sandbox": bool(args.sandbox)},
        "prompt_version": prompt_version(available),
        "tools": {"default": args.tools is None},
    }
    report = build_report(records, outcomes, tools, meta)
    _print_report(report, args.out)
    return 4 if report["controller_errors"] else 0


def _print_report(report: dict[str, Any], out_name: str | None) -> None:
    """:func:`~hugginggpt.common.print_report` of the planning report's table."""
    from .evaluation.report import markdown

    print_report(report, markdown(report), out_name)


def add_runs_parser(benches: Any, positive: Any) -> None:
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
    r.set_defaults(handler=runs_main)


async def runs_main(args: argparse.Namespace, settings: Settings) -> int:
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
