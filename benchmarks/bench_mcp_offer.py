"""What a tool server listing thousands of tools costs task planning, with the offer's bounds.

    python -m benchmarks.bench_mcp_offer [--tools N] [--runs R]

Lists the sandbox stand-in server's tools with ``--extra-tools N`` (in process: ``sandbox.mcp_tools``),
registers them as tasks as :class:`pipeline.mcp_tools.Toolbox` does, and prints the characters
of the planning request (messages and plan schema) with every tool and with the tools
:func:`pipeline.mcp_offer.offered_tools` (``[mcp]`` defaults) offers for a request, how many were
offered, and the time the choice takes per request (the first, with the word cache cold, and
the mean of the next ``R``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.mcp_offer import offered_tools
from pipeline.mcp_tools import tool_from_listing
from pipeline.planning import plan_schema, planning_messages
from pipeline.tasks import TASKS
from pipeline.types import Request
from sandbox.mcp_tools import build

REQUEST = 'Stamp "HELLO" on the photo, then convert 5 miles to kilometres'


def request_chars(available: frozenset[str]) -> int:
    """Characters of the planning request's messages and plan schema for ``available``."""
    return len(json.dumps(planning_messages(Request(text=REQUEST), available))) + len(json.dumps(plan_schema(available)))


def main() -> None:
    """Print the figures (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tools", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    listed = asyncio.run(build("ok", args.tools).list_tools())
    tools = {t.task: t for t in (tool_from_listing("many", x) for x in listed) if t is not None}
    registry = frozenset(n for n, s in TASKS.items() if s.domain != "mcp")
    for tool in tools.values():
        TASKS[tool.task] = tool.spec
    available = registry | frozenset(tools)
    offer = pipeline_config(Settings()).offer
    start = time.perf_counter()
    offered, notes = offered_tools(offer, available, set(tools), REQUEST)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.runs):
        offered_tools(offer, available, set(tools), REQUEST)
    warm = (time.perf_counter() - start) / args.runs
    print(f"tools listed: {len(tools):,} (and {len(registry)} registry tasks)")
    print(f"planning request, every tool: {request_chars(available):,} characters")
    print(f"planning request, offered tools: {request_chars(offered):,} characters "
          f"({len(offered & set(tools))} tools; max_tools {offer.max_tools}, max_tool_chars {offer.max_chars:,})")
    print(f"choice per request: {cold * 1000:.1f} ms cold, {warm * 1000:.1f} ms warm (mean of {args.runs})")
    print(f"note: {notes[0] if notes else '(none)'}")


if __name__ == "__main__":
    main()
