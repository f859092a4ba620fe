"""The overhead of estimating and charging a run, as a share of a sandbox run's orchestration CPU:
``python -m benchmarks.bench_cost [--runs N] [--repeat M]``. Target: under 2 %.

The sandbox stand-ins (controller and inference) run in a process of their own, so this process's
CPU is the bot's alone. Through the real service on a SQLite store, with prices and a budget set
(so every run is charged: a row made before the run, its estimate reserved after planning, its
actual cost settled after), ``N`` runs of three requests give a run's orchestration CPU
(``record.timings_ms["cpu"]``, every thread of this process). Then the cost path alone is timed
over ``M`` repetitions on those runs' records: the estimate of the plan and the actual cost; the
recording of the cost (settled runs written together, :data:`bot.budgets.FLUSH_ROWS` a
transaction); and, with budgets, the two transactions of a charge (the check before the run, the
reservation after planning), in CPU seconds of this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REQUESTS = ("Generate an image of a cat on a red sofa",
            "Generate an image of a dog on a beach, then tell me what objects are in it",
            "Tell me a short joke about cats")
"""Requests the sandbox planner plans (one, two and no expert task): every measured run succeeds."""


async def _serve_standins() -> None:
    """Child process: start the sandbox stand-ins, print their overrides as one JSON line, and
    serve until stdin closes."""
    from sandbox import Sandbox

    async with Sandbox() as sandbox:
        print(json.dumps(sandbox.overrides()), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def _overrides(base: dict, tmp: Path) -> dict:
    table = tmp / "prices.toml"
    table.write_text("[providers.gateway]\nper_second = 0.001\n[providers.gateway.tasks.text-to-image]\nper_image = 0.02\n")
    base["storage"] = {"data_dir": str(tmp / "data")}
    base["llm"].update(price_input_per_million=0.15, price_output_per_million=0.6)
    base["prices"] = {"file": str(table)}
    base["budgets"] = {"per_channel_day": 1000.0, "per_user_month": 1000.0}
    base["slack"] = {"rate_limit_per_minute": 0}
    return base


async def _measure(base: dict, runs: int, repeat: int) -> dict[str, float]:
    from bot.budgets import Budgets, Charge
    from bot.incoming import ConversationKey, Message, Requester
    from bot.service import Service
    from bot.settings import BudgetSettings, load_settings
    from pipeline.llm import Usage
    from pipeline.types import Done

    with tempfile.TemporaryDirectory() as tmp:
        service = await Service.create(load_settings(env={}, overrides=_overrides(base, Path(tmp))))
        try:
            records, who = [], Requester("slack", "U1", ("C1",), "T1")
            for n in range(runs):
                key = ConversationKey("slack", "T1", "C1", f"t{n}")
                events = [e async for e in service.handle(Message(REQUESTS[n % len(REQUESTS)], key=key, who=who))]
                assert isinstance(events[-1], Done) and events[-1].record.status == "ok", events[-1]
                assert events[-1].record.cost is not None
                records.append(events[-1].record)
            run_cpu = statistics.fmean(r.timings_ms["cpu"] for r in records) / 1000
            pricing, budgets = service.pipeline.pricing, Budgets(service.settings.budgets, service.store)
            usage = Usage(calls=3, prompt_tokens=5000, completion_tokens=300)
            t0 = time.process_time()
            for _ in range(repeat):
                for r in records:
                    pricing.estimate(r.tasks, usage)
                    pricing.actual(r, usage)
            pricing_cpu = (time.process_time() - t0) / (repeat * len(records))
            t0 = time.process_time()
            for _ in range(repeat):
                for r in records:
                    charge = await budgets.open(who)
                    assert isinstance(charge, Charge)
                    await charge.gate(tuple(r.tasks), r.estimate)
                    budgets.settle(charge, r)
            await budgets.close()
            charge_cpu = (time.process_time() - t0) / (repeat * len(records))
            recorder = Budgets(BudgetSettings(), service.store)  # no budget: the cost is recorded only
            t0 = time.process_time()
            for _ in range(repeat):
                for r in records:
                    charge = await recorder.open(who)
                    assert isinstance(charge, Charge)
                    recorder.settle(charge, r)
            await recorder.close()
            record_cpu = (time.process_time() - t0) / (repeat * len(records))
        finally:
            await service.close()
    return {"run": run_cpu, "pricing": pricing_cpu, "charging": charge_cpu, "recording": record_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="sandbox runs measured (default 9)")
    parser.add_argument("--repeat", type=int, default=20, help="repetitions of the cost path per run (default 20)")
    parser.add_argument("--serve-standins", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_standins:
        asyncio.run(_serve_standins())
        return
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_cost", "--serve-standins"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        base = json.loads(child.stdout.readline())  # type: ignore[union-attr]
        m = asyncio.run(_measure(base, args.runs, args.repeat))
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(timeout=30)
    run = m["run"]
    print(f"sandbox run, orchestration CPU (mean of {args.runs}): {run * 1000:.2f} ms")
    print(f"estimate + actual cost per run:                  {m['pricing'] * 1e6:.1f} us CPU")
    print(f"recording the cost per run (no budget):          {m['recording'] * 1e6:.1f} us CPU")
    print(f"charging per run with budgets (check, reserve, settle): {m['charging'] * 1e6:.1f} us CPU")
    print(f"overhead without budgets: {100 * (m['pricing'] + m['recording']) / run:.2f} % of a run's orchestration CPU"
          " (target < 2 %)")
    print(f"overhead with budgets:    {100 * (m['pricing'] + m['charging']) / run:.2f} % of a run's orchestration CPU")


if __name__ == "__main__":
    main()
