"""How recorded plans end once normalised and validated: accepted as is, normalised (by rule),
repaired, refused (by reason), and the time it takes per plan.

    python -m benchmarks.bench_plans [FILE ...]

``FILE`` holds recorded plans as ``hugginggpt eval plans`` reads them (TaskBench's prediction
lines; default: the hand-written quirky plans in ``tests/fixtures/plans``). Nothing is run and no
controller is asked: the "repaired" count uses the repair answers the lines record.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hugginggpt.evaluation.plans import evaluate, load_plans, summary, text_report
from pipeline.tasks import TASKS

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "plans" / "quirky_plans.jsonl"


def main() -> None:
    """Print the counts and the normalise-and-validate time per plan (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, default=[DEFAULT])
    args = parser.parse_args()
    cases = [c for path in args.files for c in load_plans(path.read_text(encoding="utf-8"))]
    start = time.perf_counter()
    verdicts = [evaluate(c, frozenset(TASKS)) for c in cases]
    elapsed = time.perf_counter() - start
    print(text_report(summary(verdicts)))
    print(f"time per plan:                {elapsed / len(cases) * 1000:.2f} ms (normalise + validate, repair answer included)")


if __name__ == "__main__":
    main()
