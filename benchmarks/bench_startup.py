"""Start-up benchmark: how long the commands take before they can serve, each in a fresh process.

Prints the median (and min/max) wall time over ``--repeat`` runs of:

* ``hugginggpt --version`` and ``hugginggpt --help`` (whole commands: they load no pipeline);
* ``hugginggpt run TEXT`` with its output redirected: time until its first progress line on stderr;
* the floors: ``python -c pass`` (the interpreter's start) and ``python -c "import openai"``;
* ``hugginggpt run --sandbox TEXT``: time until its first line on stderr (it says it is starting
  before the stand-ins load) and its whole time (mostly the sandbox's simulated model latency, so
  a sanity figure, and the process's exit);
* ``hugginggpt chat --sandbox``: time until its first line ("Conversation ...") is printed, with a
  new data directory (the store is created) and with a current one (the store only opened);
* a bot start's store: a fresh interpreter that imports :mod:`bot.store`, opens the store of
  ``[storage]`` with :func:`bot.store.open_store` (what ``Service.create`` does for ``slack`` and
  ``discord``) and closes it; on a current SQLite file and, with ``--postgres``, on PostgreSQL.

Each line gives wall seconds and CPU seconds (user + system of the command's process, from
``getrusage``; for the store open, the child's own ``process_time``): on a shared, loaded machine
the wall time swings by seconds while the CPU time stays put, so compare the CPU figures there.

Run: ``python -m benchmarks.bench_startup [--repeat N] [--postgres] [--code DIR]`` (``--code``: time
the code of another checkout, e.g. the main branch, with this interpreter).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ROOT
"""The checkout whose code is timed (``--code``)."""
HG = [sys.executable, "-m", "hugginggpt"]

OPEN_STORE = """
import asyncio, time
t0, c0 = time.perf_counter(), time.process_time()
from bot.settings import Settings
from bot.store import MediaStore, open_store
async def main():
    s = Settings().storage
    store = await open_store(s, MediaStore(s.data_dir))
    t1, c1 = time.perf_counter(), time.process_time()
    await store.close()
    return t1, c1
t1, c1 = asyncio.run(main())
print(f"{t1 - t0:.4f} {c1 - c0:.4f}")
"""


def _env(data_dir: Path, url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUGGINGGPT_")}
    env.update(HUGGINGGPT_STORAGE__DATA_DIR=str(data_dir), HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=str(CODE))
    if url:
        env["HUGGINGGPT_STORAGE__DATABASE_URL"] = url
    return env


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def time_run(data_dir: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one ``hugginggpt run --sandbox`` (a text-only request)."""
    t, c = time.perf_counter(), children_cpu()
    subprocess.run([*HG, "run", "--sandbox", "Say hello"], env=_env(data_dir), cwd=CODE, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return time.perf_counter() - t, children_cpu() - c


def time_command(data_dir: Path, *args: str) -> tuple[float, float]:
    """Wall and CPU seconds of ``hugginggpt ARGS`` (``--version``, ``--help``) to its end."""
    t, c = time.perf_counter(), children_cpu()
    subprocess.run([*HG, *args], env=_env(data_dir), cwd=CODE, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)
    return time.perf_counter() - t, children_cpu() - c


def time_first_progress(data_dir: Path) -> tuple[float, float]:
    """Wall seconds until ``hugginggpt run`` with its output redirected prints its first progress
    line on stderr, and the CPU seconds until then (the process is stopped there). The controller
    is configured but never reached: the line comes before any backend is contacted, and the
    sandbox's stand-ins (which start before a ``--sandbox`` run) are not part of a real run."""
    t, c = time.perf_counter(), children_cpu()
    env = _env(data_dir) | {"HUGGINGGPT_LLM__BASE_URL": "http://127.0.0.1:9/v1", "HUGGINGGPT_LLM__API_KEY": "sk-bench"}
    p = subprocess.Popen([*HG, "run", "Say hello"], env=env, cwd=CODE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        took = time.perf_counter() - t
        if not line.strip():
            raise RuntimeError("run printed no progress")
    finally:
        p.kill()
        p.wait(timeout=60)
    return took, children_cpu() - c


def time_floor(code: str) -> tuple[float, float]:
    """Wall and CPU seconds of ``python -c CODE``: ``pass`` (the interpreter's start) or ``import
    openai`` (the floor of anything that talks to the controller)."""
    t, c = time.perf_counter(), children_cpu()
    subprocess.run([sys.executable, "-c", code], env=_env(Path(tempfile.gettempdir())), cwd=CODE, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return time.perf_counter() - t, children_cpu() - c


def time_sandbox_first_line(data_dir: Path) -> tuple[float, float]:
    """Wall seconds until ``hugginggpt run --sandbox`` with its output redirected prints its first
    line on stderr (the process is stopped there), and the CPU seconds until then."""
    t, c = time.perf_counter(), children_cpu()
    p = subprocess.Popen([*HG, "run", "--sandbox", "Say hello"], env=_env(data_dir), cwd=CODE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        took = time.perf_counter() - t
        if not line.strip():
            raise RuntimeError("run --sandbox printed nothing")
    finally:
        p.kill()
        p.wait(timeout=60)
    return took, children_cpu() - c


def time_chat(data_dir: Path) -> tuple[float, float]:
    """Wall seconds until ``hugginggpt chat --sandbox`` prints its first line (then its input is
    closed and it leaves), and the CPU seconds of the whole process."""
    t, c = time.perf_counter(), children_cpu()
    p = subprocess.Popen([*HG, "chat", "--sandbox"], env=_env(data_dir), cwd=CODE, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        took = time.perf_counter() - t
        if not line.startswith("Conversation"):
            raise RuntimeError(f"chat printed {line!r} first")
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    return took, children_cpu() - c


def time_open(data_dir: Path, url: str | None = None) -> tuple[float, float]:
    """Wall and CPU seconds from the start of the store module's import to an open store (fresh process)."""
    out = subprocess.run([sys.executable, "-c", OPEN_STORE], env=_env(data_dir, url), cwd=CODE, check=True,
                         capture_output=True, text=True, timeout=120)
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def show(name: str, values: list[tuple[float, float]]) -> None:
    """Print the median (min, max) of the wall and of the CPU seconds of ``values``."""
    walls, cpus = [w for w, _ in values], [c for _, c in values]
    print(f"{name:<58} wall median {statistics.median(walls):6.3f} s (min {min(walls):.3f}, max {max(walls):.3f});"
          f" CPU median {statistics.median(cpus):6.3f} s (min {min(cpus):.3f}, max {max(cpus):.3f}); n={len(values)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--postgres", action="store_true", help="also open a PostgreSQL store (a throwaway server)")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code is timed (default: this one)")
    args = ap.parse_args(argv)
    global CODE
    CODE = args.code.resolve()
    print(f"code: {CODE}")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        base = Path(tmp)
        floors = {code: [time_floor(code) for _ in range(args.repeat)] for code in ("pass", "import openai")}
        show("python -c pass (the interpreter's start)", floors["pass"])
        show("python -c 'import openai' (the openai import floor)", floors["import openai"])
        for flag in ("--version", "--help"):
            show(f"hugginggpt {flag}", [time_command(base / "flags", flag) for _ in range(args.repeat)])
        show("hugginggpt run, first progress line (stderr)",
             [time_first_progress(base / f"first-{i}") for i in range(args.repeat)])
        show("hugginggpt run --sandbox, first line (stderr)",
             [time_sandbox_first_line(base / f"sandbox-{i}") for i in range(args.repeat)])
        show("hugginggpt run --sandbox (whole command)", [time_run(base / "run") for _ in range(args.repeat)])
        show("hugginggpt chat --sandbox, first line, new data dir",
             [time_chat(base / f"chat-new-{i}") for i in range(args.repeat)])
        time_chat(base / "chat")
        show("hugginggpt chat --sandbox, first line, current store", [time_chat(base / "chat") for _ in range(args.repeat)])
        show("bot start: import + open_store, current SQLite file", [time_open(base / "chat") for _ in range(args.repeat)])
        if args.postgres:
            from benchmarks.harness.realparts import PostgresServer

            server = PostgresServer(base / "postgres").start()
            try:
                url = server.create_database("startup")
                time_open(base / "pg", url)
                show("bot start: import + open_store, current PostgreSQL database",
                     [time_open(base / "pg", url) for _ in range(args.repeat)])
            finally:
                server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
