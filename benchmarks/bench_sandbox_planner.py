"""How often the ``--sandbox`` stand-in planner finds no task for other people's wording.

    python -m benchmarks.bench_sandbox_planner [FILE ...]

``FILE`` holds TaskBench requests, one JSON object a line with ``user_request`` (default: the 400
requests and 91 gold records of both tool domains in ``tests/fixtures/taskbench``; TaskBench's full
``user_requests.json`` files work too). Each request is planned by :func:`sandbox.planning.plan_tasks`
with the files it names attached as the conversation's resources (ids, kinds and names, as the
planner sees them), every task of the registry available, as the first turn of a conversation. A request with no task is one the
stand-in declines (``hugginggpt run --sandbox`` exits with status 5 and says so). Printed per
file and in all: declined, planned with model tasks, planned as text for the controller only
(``text-generation`` / ``conversational``), and the planning time per request.

To compare with another version of the planner, run the script with ``PYTHONPATH`` on that
checkout (a planner older than ``first_turn``: this script as of commit ed7a099; the "before"
figures in docs/benchmarks.md were taken that way).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hugginggpt.evaluation.taskbench import resources_for
from pipeline.tasks import TASKS
from sandbox.planning import plan_tasks

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "taskbench"
DEFAULT = [FIXTURES / n for n in ("data_huggingface_requests.jsonl", "data_multimedia_requests.jsonl",
                                  "gold_huggingface.jsonl", "gold_multimedia.jsonl")]
CONTROLLER_ONLY = {"text-generation", "conversational"}


def requests_in(path: Path) -> list[str]:
    """The ``user_request`` of every JSON line of ``path`` that has one."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("user_request"), str):
                out.append(record["user_request"])
    return out


def outcomes(requests: list[str]) -> dict[str, int]:
    """Counts of ``declined``, ``model`` (some model task planned) and ``controller`` (only text
    for the controller) over ``requests``."""
    counts = {"declined": 0, "model": 0, "controller": 0}
    available = sorted(TASKS)
    for text in requests:
        plan = plan_tasks(text, [r.prompt_view() for r in resources_for(text)], available, first_turn=True)
        if not plan:
            counts["declined"] += 1
        elif {t["task"] for t in plan} <= CONTROLLER_ONLY:
            counts["controller"] += 1
        else:
            counts["model"] += 1
    return counts


def _line(name: str, n: int, counts: dict[str, int]) -> str:
    pct = {k: 100 * v / max(1, n) for k, v in counts.items()}
    return (f"{name:38} {n:5d} requests  declined {counts['declined']:4d} ({pct['declined']:4.1f} %)  "
            f"model tasks {pct['model']:4.1f} %  controller only {pct['controller']:4.1f} %")


def main() -> None:
    """Print the figures (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT)
    args = parser.parse_args()
    total = {"declined": 0, "model": 0, "controller": 0}
    n_all = 0
    start = time.perf_counter()
    for path in args.files:
        requests = requests_in(path)
        counts = outcomes(requests)
        print(_line(path.name, len(requests), counts))
        n_all += len(requests)
        total = {k: total[k] + counts[k] for k in total}
    elapsed = time.perf_counter() - start
    print(_line("all", n_all, total))
    print(f"planning time per request: {elapsed / max(1, n_all) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
