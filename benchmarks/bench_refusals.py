"""How often a request sent with no file is refused before task planning, and why.

    python -m benchmarks.bench_refusals [--requests FILE ...] [--examples N]

Runs the admission check on request texts (``bot.mentions.missing_file``: a request clearly
relying on a file that is not there is refused) as ``hugginggpt run TEXT`` would, with no file
attached and an empty conversation. ``FILE`` holds JSON lines ``{"id", "user_request"}`` as
TaskBench's ``user_requests.json`` does (default: the 400 requests in ``tests/fixtures/taskbench``;
pass TaskBench's own files for every request). Prints the requests read, refusals per 100, each
reason (file names folded to ``FILE``) with its count and a few examples, then the hand-checked
sample ``tests/fixtures/taskbench/mention_verdicts.jsonl``: how many verdicts agree.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from bot.mentions import missing_file

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "taskbench"
DEFAULT = [FIXTURES / "data_huggingface_requests.jsonl", FIXTURES / "data_multimedia_requests.jsonl"]


def read_requests(paths: list[Path]) -> list[tuple[str, str]]:
    """``(id, request text)`` of every JSON line of ``paths`` (``{"id", "user_request"}``)."""
    out = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                out.append((str(record.get("id")), record["user_request"]))
    return out


def main() -> None:
    """Print the refusal figures (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", nargs="+", type=Path, default=DEFAULT)
    ap.add_argument("--examples", type=int, default=3)
    args = ap.parse_args()
    requests = read_requests(args.requests)
    reasons: dict[str, list[str]] = defaultdict(list)
    for _id, text in requests:
        if sentence := missing_file(text, [], [], None):
            reasons[re.sub(r"You mention \S+,", "You mention FILE,", sentence)].append(text)
    refused = sum(len(v) for v in reasons.values())
    print(f"{len(requests)} requests, {refused} refused: {100 * refused / max(1, len(requests)):.1f} per 100")
    for reason, texts in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(texts):6d}  {reason}")
        for text in texts[: args.examples]:
            print(f"          e.g. {text[:150]}")
    sample = [json.loads(line) for line in (FIXTURES / "mention_verdicts.jsonl").read_text(encoding="utf-8").splitlines()]
    agree = sum((missing_file(r["request"], [], [], None) is not None) == (r["verdict"] == "refuse") for r in sample)
    print(f"hand-checked sample: {agree}/{len(sample)} verdicts agree")


if __name__ == "__main__":
    main()
