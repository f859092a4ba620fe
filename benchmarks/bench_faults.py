"""Fault benchmark (issue 14): a fixed set of faults, each a real ``hugginggpt run`` process.

    python -m benchmarks.bench_faults [--deadline S] [--only NAME ...] [--no-serve | --serve-only]

Faults: a trickling, a hanging and a 429-storming controller (``Retry-After: 50``), a 1 GiB
controller reply and an HTML page; hanging, slow, garbage-answering and 1 GiB-answering experts;
a garbage plan and a cyclic plan; ``kill -9`` mid-run; two processes on one data dir with a media
quota. Each fault has the exit status it must end with. Prints one line per fault and then::

    clean N/M, tracebacks T, over-deadline O (worst +X s), peak RSS R MB, turns lost L, secrets shown S

*clean*: the expected exit status, no traceback, within deadline + 1 s, no secret shown.
*over-deadline*: runs whose own measured time (``timings_ms.total`` of the record, else wall time
minus a trivial run's start-up) passed deadline + 1 s. *peak RSS*: the largest resident set of any
``hugginggpt`` process (``getrusage(RUSAGE_CHILDREN)``). *turns lost*: requests whose turn row is
missing from the store afterwards. *secrets shown*: occurrences of the API key, the Hugging Face
token or a URL password in any output, log file or the database.
Target: ``clean M/M, T 0, O 0 (worst ≤ +1 s), R ≤ 400 MB with a 1 GiB reply, L 0, S 0``.

Then the ``hugginggpt serve`` cases (:mod:`benchmarks.faults_serve`): a full disk, a database
corrupted under the server, a browser page; one line each with requests tried, statuses,
tracebacks in the logs and recovery. Target: storage faults only 503 (or an error event in a
stream), tracebacks 0, the full disk recovered; the browser's other origin blocked, rebinding 421,
the allowed origin 200.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sandbox.faulty_controller import FaultyController

ROOT = Path(__file__).resolve().parent.parent
PHOTO = ROOT / "tests" / "fixtures" / "media" / "chelsea.png"
API_KEY = "sk-bench-SECRET-4f1c9a"
HF_TOKEN = "hf_benchSECRET9b2d7e"
URL_PASSWORD = "urlpass-SECRET-77"
SECRETS = (API_KEY, HF_TOKEN, URL_PASSWORD)
GiB = 1 << 30

CAPTION = json.dumps({"tasks": [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]})
CYCLE = json.dumps({"tasks": [
    {"task": "image-to-text", "id": 0, "dep": [1], "args": {"image": "image-1"}},
    {"task": "summarization", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}},
]})
DRAW = json.dumps({"tasks": [{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a red fox"}}]})


@dataclass
class Fault:
    name: str
    expect: set[int]
    setup: Callable[[FaultyController], None] = lambda c: None
    env: dict[str, str] = field(default_factory=dict)
    photo: bool = False
    experts: bool = False  # use the sandbox's expert stand-in instead of the faulty one
    kind: str = "run"  # "run", "kill" or "pair"


def _set(**values: Any) -> Callable[[FaultyController], None]:
    def apply(c: FaultyController) -> None:
        for k, v in values.items():
            setattr(c, k, v)
    return apply


FAULTS = [
    Fault("trickling controller answer", {7}, _set(answer="word " * 60, chunks=60, trickle=0.5, plan_trickle=0.0)),
    Fault("hanging controller", {7}, _set(trickle=10_000)),
    Fault("429 storm, Retry-After 50", {7}, _set(status=429, retry_after=50), env={"HUGGINGGPT_LLM__MAX_RETRIES": "6"}),
    Fault("1 GiB controller reply", {4}, _set(huge=GiB)),
    Fault("HTML page from the controller", {4}, _set(html=True)),
    Fault("garbage plan", {5}, _set(plan="Sure! I would first look at the picture, then describe it.")),
    Fault("cyclic plan", {5}, _set(plan=CYCLE), photo=True),
    Fault("hanging experts", {7}, _set(plan=CAPTION, expert_delay=10_000), photo=True),
    Fault("slow failing experts", {6}, _set(plan=CAPTION, expert_delay=0.5), photo=True),
    Fault("garbage expert body", {6}, _set(plan=CAPTION, expert_garbage=True), photo=True),
    Fault("1 GiB expert reply", {6}, _set(plan=DRAW, expert_huge=GiB)),
    Fault("credentials in [llm] base_url, unreachable", {4}, env={"BASE_URL_WITH_PASSWORD": "1"}),
    Fault("kill -9 mid-run, then a new process", {0}, _set(plan=DRAW), experts=True, kind="kill"),
    Fault("two processes on one data dir with a media quota", {0}, _set(plan=DRAW), experts=True, kind="pair",
          env={"HUGGINGGPT_STORAGE__MAX_MEDIA_BYTES": str(1 << 20)}),
]


def _env(c: FaultyController, data: Path, deadline: float, fault: Fault, experts_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env.update({
        "HUGGINGGPT_STORAGE__DATA_DIR": str(data),
        "HUGGINGGPT_LLM__BASE_URL": c.url,
        "HUGGINGGPT_LLM__API_KEY": API_KEY,
        "HUGGINGGPT_LLM__MAX_RETRIES": "1",
        "HUGGINGGPT_INFERENCE__BASE_URL": experts_url or f"http://127.0.0.1:{c.port}",
        "HUGGINGGPT_INFERENCE__TOKEN": HF_TOKEN,
        "HUGGINGGPT_INFERENCE__SELECTION": "top",
        "HUGGINGGPT_INFERENCE__BACKOFF_MAX": "0.2",
        "HUGGINGGPT_INFERENCE__DEADLINE": f"{deadline:g}",
        "PYTHONPATH": str(ROOT),
    })
    env.update({k: v for k, v in fault.env.items() if k.startswith("HUGGINGGPT_")})
    if "BASE_URL_WITH_PASSWORD" in fault.env:
        env["HUGGINGGPT_LLM__BASE_URL"] = f"http://bench:{URL_PASSWORD}@127.0.0.1:9/v1"
    return env


def _command(fault: Fault, text: str = "describe this") -> list[str]:
    cmd = [sys.executable, "-m", "hugginggpt", "run", "--json", text]
    if fault.photo:
        cmd += ["--file", str(PHOTO)]
    return cmd


CHAT = [sys.executable, "-m", "hugginggpt", "chat"]
"""A conversation (its turns are stored, so they can be counted), fed on standard input."""


@dataclass
class Outcome:
    name: str
    status: int
    expected: set[int]
    seconds: float
    run_seconds: float | None
    traceback: bool
    secrets: int
    lost: int = 0
    note: str = ""


def _secrets_in(texts: list[str], data: Path) -> int:
    blobs = list(texts)
    for f in data.rglob("*"):
        if f.is_file() and (f.suffix in (".log", ".db", ".sqlite", ".json") or ".log." in f.name):
            blobs.append(f.read_bytes().decode("utf-8", "replace"))
    return sum(b.count(s) for b in blobs for s in SECRETS)


def _turns(data: Path) -> list[tuple[str, str]]:
    dbs = [p for p in data.rglob("*.sqlite3") if p.is_file()]
    rows: list[tuple[str, str]] = []
    for db in dbs:
        with sqlite3.connect(db) as con:
            try:
                rows += con.execute("SELECT user_text, status FROM turns").fetchall()
            except sqlite3.Error:
                pass
    return rows


def run_fault(fault: Fault, deadline: float, startup: float) -> Outcome:
    c = FaultyController().start()
    try:
        fault.setup(c)
        experts_url = c.start_experts() if fault.experts else None
        with tempfile.TemporaryDirectory(prefix="hgpt-fault-") as tmp:
            data = Path(tmp) / "data"
            env = _env(c, data, deadline, fault, experts_url)
            t0 = time.monotonic()
            if fault.kind == "run":
                p = subprocess.run(_command(fault), cwd=tmp, env=env, capture_output=True, text=True, timeout=deadline + 60)
                took = time.monotonic() - t0
                doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else None
                run_s = doc["timings_ms"]["total"] / 1000 if doc else None
                out = [p.stdout, p.stderr]
                return Outcome(fault.name, p.returncode, fault.expect, took, run_s,
                               "Traceback" in p.stderr + p.stdout, _secrets_in(out, data),
                               note=(doc or {}).get("error") or "")
            if fault.kind == "kill":
                c._experts.latency["text-to-image"] = 30.0  # type: ignore[attr-defined]
                slow = subprocess.Popen(CHAT, cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
                assert slow.stdin is not None
                slow.stdin.write("first request\n")
                slow.stdin.flush()
                time.sleep(startup + 1.5)
                slow.send_signal(signal.SIGKILL)
                s_out, s_err = slow.communicate()
                c._experts.latency.clear()  # type: ignore[attr-defined]
                p = subprocess.run(CHAT, input="second request\n/quit\n", cwd=tmp, env=env, capture_output=True,
                                   text=True, timeout=deadline + 60)
                took = time.monotonic() - t0
                turns = _turns(data)
                texts = {t for t, _ in turns}
                lost = sum(1 for t in ("first request", "second request") if t not in texts)
                stuck = sum(1 for _, status in turns if status == "running")  # the killed turn must not stay running
                return Outcome(fault.name, p.returncode, fault.expect, took, None,
                               "Traceback" in p.stderr + p.stdout, _secrets_in([p.stdout, p.stderr, s_out, s_err], data),
                               lost=lost + stuck, note=f"turns: {sorted(turns)}")
            # two processes at once on one data dir
            c._experts.latency["text-to-image"] = 1.0  # type: ignore[attr-defined]
            procs = [subprocess.Popen(CHAT, cwd=tmp, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in (1, 2)]
            for i, pr in zip((1, 2), procs):  # both at once: each starts while the other runs
                assert pr.stdin is not None
                pr.stdin.write(f"request {i}\n/quit\n")
                pr.stdin.flush()
            results = [pr.communicate(timeout=deadline + 60) for pr in procs]
            took = time.monotonic() - t0
            status = max(pr.returncode for pr in procs)
            turns = _turns(data)
            lost = sum(1 for i in (1, 2) if (f"request {i}", "ok") not in turns)  # both answered, neither harmed
            flat = [x for r in results for x in r]
            return Outcome(fault.name, status, fault.expect, took, None, any("Traceback" in x for x in flat),
                           _secrets_in(flat, data), lost=lost,
                           note="; ".join(r[1].strip().splitlines()[-1] for r in results if r[1].strip()))
    finally:
        c.close()


def _startup() -> float:
    """Wall seconds of a trivial run (the process's start-up, imports included)."""
    c = FaultyController().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = _env(c, Path(tmp) / "data", 60, Fault("baseline", {0}), None)
            t0 = time.monotonic()
            subprocess.run(_command(Fault("baseline", {0}), "hello"), cwd=tmp, env=env, capture_output=True, timeout=120)
            return time.monotonic() - t0
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deadline", type=float, default=5.0, help="[inference] deadline of each run, seconds (default 5)")
    ap.add_argument("--only", nargs="*", help="run only faults whose name contains one of these words")
    ap.add_argument("--no-serve", action="store_true", help="skip the hugginggpt serve cases")
    ap.add_argument("--serve-only", action="store_true", help="only the hugginggpt serve cases")
    args = ap.parse_args(argv)
    if args.serve_only:
        return _serve_cases(args.only)
    startup = _startup()
    print(f"start-up of a trivial run: {startup:.2f} s; deadline {args.deadline:g} s")
    faults = [f for f in FAULTS if not args.only or any(w in f.name for w in args.only)]
    outcomes = []
    for fault in faults:
        o = run_fault(fault, args.deadline, startup)
        outcomes.append(o)
        own = o.run_seconds if o.run_seconds is not None else o.seconds - startup
        over = own - args.deadline
        clean = o.status in o.expected and not o.traceback and o.secrets == 0 and over <= 1.0 and o.lost == 0
        print(f"{'ok  ' if clean else 'FAIL'} {o.name:<50} exit {o.status} (want {'/'.join(map(str, sorted(o.expected)))}) "
              f"{own:6.2f} s  {o.note[:90]}")
        o.note = "clean" if clean else "dirty"
    overs = [((o.run_seconds if o.run_seconds is not None else o.seconds - startup) - args.deadline) for o in outcomes]
    over_n = sum(1 for x in overs if x > 1.0)
    worst = max(overs) if overs else 0.0
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    clean_n = sum(1 for o in outcomes if o.note == "clean")
    print(
        f"clean {clean_n}/{len(outcomes)}, tracebacks {sum(o.traceback for o in outcomes)}, "
        f"over-deadline {over_n} (worst {worst:+.1f} s), peak RSS {rss_mb:.0f} MB, "
        f"turns lost {sum(o.lost for o in outcomes)}, secrets shown {sum(o.secrets for o in outcomes)}"
    )
    served_ok = args.no_serve or _serve_cases(args.only) == 0
    return 0 if clean_n == len(outcomes) and served_ok else 1


def _serve_cases(only: list[str] | None) -> int:
    import asyncio

    from benchmarks.faults_serve import run_all

    cases = asyncio.run(run_all(only))
    return 0 if all(c.tracebacks == 0 for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
