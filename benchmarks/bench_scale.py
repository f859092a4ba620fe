"""Benchmark of Slack HTTP-mode replicas behind nginx on one store (issue 11, "Scale out").

Real ``hugginggpt slack --mode http`` processes (benchmarks/harness/slack_replicas.py) behind nginx
(benchmarks/harness/realparts.py), the stand-in Slack and the sandbox backends in this process, the experts with
a fixed latency (``--latency`` seconds per text-to-image call, so experts dominate a run). Every
conversation is one ``app_mention``, delivered twice: through nginx (the acknowledgement is timed
there) and then directly to another replica than the one nginx chose (read from an
``X-Upstream`` header added to the generated nginx config), as a Slack retry landing elsewhere.

Two phases on the same workload, each on a fresh store: 1 replica, then ``--replicas`` replicas
with one of them killed with SIGKILL once half the events are sent. Printed per phase: answers per
answered thread (finished runs; must be 1.00: no duplicate), answered, answered threads that still
show an unfinished "working" message of the killed replica (killed between posting it and noting
it with its claim), interrupted (runs of the killed replica, stored as interrupted by another
process, which tells their thread), turns lost (neither answered nor stored), the acknowledgement latency at nginx (p50/p99), runs per minute (answered
runs over the time from the first delivery to the last answer), and the time from the SIGKILL
until the store shows none of the killed replica's turns running (polled every 0.1 s).

Store: a shared SQLite data dir in a temp dir (default); ``--database-url URL`` (PostgreSQL,
``[storage] database_url``; one fresh database per phase is not possible there, so both phases
share it); ``--postgres`` starts a throwaway PostgreSQL server (benchmarks.harness.realparts.PostgresServer)
with one database per phase.

    python -m benchmarks.bench_scale [--conversations 300] [--replicas 3] [--latency 2]
                                     [--lease-seconds 30] [--postgres | --database-url URL] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

TARGET_ACK_P99_MS = 100.0
TARGET_SPEEDUP = 2.5


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))] if s else float("nan")


@dataclass
class Phase:
    """What one phase measured."""

    replicas: int
    events: int = 0
    acks: list[float] = field(default_factory=list)  # seconds, POST through nginx
    failed_posts: int = 0  # deliveries through nginx that did not get 200
    runs_per_thread: list[int] = field(default_factory=list)  # finished answers per answered thread
    left_working: int = 0  # answered threads still showing an unfinished status message of a dead replica
    answered: int = 0
    interrupted: int = 0
    lost: int = 0
    seconds: float = 0.0  # first delivery to last answer
    killed_running: int | None = None  # turns of the killed replica running at the kill
    marked_after: float | None = None  # seconds from SIGKILL until none of them runs

    @property
    def runs_per_minute(self) -> float:
        return self.answered / self.seconds * 60 if self.seconds else 0.0


class StoreProbe:
    """Read-only queries on the replicas' store (SQLAlchemy async: aiosqlite or asyncpg)."""

    def __init__(self, storage: dict[str, str]) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        if storage.get("database_url"):
            from bot.store.sql.database import parse_url

            url = parse_url(storage["database_url"])
        else:
            url = f"sqlite+aiosqlite:///{Path(storage['data_dir']) / 'conversations.sqlite3'}"
        self.engine = create_async_engine(url)

    async def query(self, sql: str, **params: object) -> list:
        from sqlalchemy import text

        async with self.engine.connect() as conn:
            return list((await conn.execute(text(sql), params)).all())

    async def owner_of(self, pid: int) -> str | None:
        rows = await self.query("SELECT id FROM owners WHERE pid = :pid", pid=pid)
        return rows[0][0] if rows else None

    async def running(self, owner: str) -> int:
        rows = await self.query("SELECT count(*) FROM turns WHERE owner = :o AND status = 'running'", o=owner)
        return int(rows[0][0])

    async def turns_by_thread(self, workspace: str) -> dict[str, list[tuple[str, str | None]]]:
        rows = await self.query("SELECT c.thread, t.status, t.error FROM turns t JOIN conversations c ON c.id = t.conversation_id"
                                " WHERE c.workspace = :w", w=workspace)
        out: dict[str, list[tuple[str, str | None]]] = {}
        for thread, status, error in rows:
            out.setdefault(thread, []).append((status, error))
        return out

    async def close(self) -> None:
        await self.engine.dispose()


def nginx_with_upstream_header(root: Path, upstreams: list[str]):
    """benchmarks.harness.realparts.NginxServer whose responses say which replica answered (``X-Upstream``)."""
    from benchmarks.harness import realparts

    if "X-Upstream" not in realparts.NGINX_CONF:
        realparts.NGINX_CONF = realparts.NGINX_CONF.replace(
            "proxy_pass http://bots;", "proxy_pass http://bots;\n            add_header X-Upstream $upstream_addr always;")
    return realparts.NginxServer(root, upstreams).start()


async def run_phase(root: Path, storage: dict[str, str], *, replicas: int, conversations: int, latency: float,
                    lease_seconds: float, kill: bool) -> Phase:
    import aiohttp

    from sandbox import Sandbox
    from benchmarks.harness.slack_replicas import SECRET, Fleet
    from sandbox.slack_api import SlackStandIn, signed_headers

    phase = Phase(replicas)
    # a workspace of its own per phase: both phases may share one database (--database-url)
    async with SlackStandIn(team_id=f"T0BENCH{replicas}{int(kill)}") as slack, Sandbox(latency={"text-to-image": latency}) as sandbox:
        settings = {**sandbox.overrides(), "storage": {**storage, "lease_seconds": lease_seconds},
                    "slack": {"rate_limit_per_minute": 0}}
        async with Fleet(root / "fleet", slack, settings, n=replicas, grace=5) as fleet:
            nginx = nginx_with_upstream_header(root / "nginx", [r.address for r in fleet.replicas])
            probe = StoreProbe(storage)
            try:
                by_address = {r.address: r for r in fleet.replicas}
                dead: set[int] = set()
                threads: list[str] = []
                victim = fleet.replicas[-1] if kill else None
                victim_owner = await probe.owner_of(victim.proc.pid) if victim else None
                kill_at = conversations // 2
                killed_at: float | None = None
                sem = asyncio.Semaphore(8)
                sent = 0

                async def deliver(i: int) -> None:
                    nonlocal sent, killed_at
                    body, ts = fleet.mention(f"draw a picture of a lighthouse number {i}", user=f"U{i:05d}")
                    threads.append(ts)
                    raw = __import__("json").dumps(body)
                    async with sem:
                        t0 = time.perf_counter()
                        try:
                            async with fleet.session.post(nginx.url + "/slack/events", data=raw,
                                                          headers=signed_headers(SECRET, raw)) as resp:
                                await resp.read()
                                status, upstream = resp.status, resp.headers.get("X-Upstream", "")
                        except aiohttp.ClientError:
                            status, upstream = 0, ""
                        phase.acks.append(time.perf_counter() - t0)
                        if status != 200:
                            phase.failed_posts += 1
                        chosen = by_address.get(upstream.split(",")[-1].strip())
                        others = [r for r in fleet.replicas if r is not chosen and r.index not in dead] or \
                                 [r for r in fleet.replicas if r.index not in dead]
                        await fleet.deliver(random.choice(others).url, body, retry_num=1)
                    sent += 1
                    if victim is not None and sent == kill_at and killed_at is None:
                        until = time.monotonic() + 10  # mid-run: once the victim has a turn running
                        while victim_owner and not await probe.running(victim_owner) and time.monotonic() < until:
                            await asyncio.sleep(0.05)
                        phase.killed_running = await probe.running(victim_owner) if victim_owner else None
                        victim.signal(signal.SIGKILL)
                        dead.add(victim.index)
                        killed_at = time.monotonic()

                start = time.monotonic()
                await asyncio.gather(*(deliver(i) for i in range(conversations)))
                phase.events = conversations

                deadline = time.monotonic() + lease_seconds * 2 + 120
                last_state, last_change = None, time.monotonic()
                while True:
                    if killed_at is not None and phase.marked_after is None and victim_owner:
                        if await probe.running(victim_owner) == 0:
                            phase.marked_after = time.monotonic() - killed_at
                    stored = await probe.turns_by_thread(slack.team_id)
                    answered = [ts for ts in threads if fleet.answers(ts)]
                    interrupted = [ts for ts in threads if not fleet.answers(ts)
                                   and any(e == "interrupted" for _, e in stored.get(ts, []))]
                    settled = len(answered) + len(interrupted) == len(threads)
                    marked = killed_at is None or phase.marked_after is not None or not victim_owner
                    state = (len(answered), len(interrupted))
                    if state != last_state:
                        last_state, last_change = state, time.monotonic()
                    running = any(s == "running" for turns in stored.values() for s, _ in turns)
                    quiet = not running and time.monotonic() - last_change > 10  # the rest are lost: nothing runs
                    if (marked and (settled or quiet)) or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.1)
                phase.answered, phase.interrupted = len(answered), len(interrupted)
                phase.lost = len(threads) - len(answered) - len(interrupted)
                # answers: finished runs (a dead replica's unfinished "working" message is no answer)
                phase.runs_per_thread = [fleet.answers(ts) for ts in answered]
                phase.left_working = sum(len(fleet.status_messages(ts)) - fleet.answers(ts) > 0 for ts in answered)
                last = max((m.edits[-1][0] if m.edits else m.posted_at) for ts in answered for m in fleet.status_messages(ts))
                phase.seconds = last - start
            finally:
                nginx.stop()
                await probe.close()
    return phase


def fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def report(one: Phase, many: Phase, *, latency: float, lease: float, store: str) -> None:
    print(f"Slack HTTP-mode replicas behind nginx, store: {store}; experts: {latency:g} s per text-to-image call; "
          f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    label = f"{many.replicas} replicas (1 killed)"
    rows = [
        ("events (each delivered twice)", f"{one.events}", f"{many.events}"),
        ("answers per answered thread (mean)", f"{statistics.mean(one.runs_per_thread or [0]):.2f}",
         f"{statistics.mean(many.runs_per_thread or [0]):.2f}"),
        ("most answers in one thread", f"{max(one.runs_per_thread or [0])}", f"{max(many.runs_per_thread or [0])}"),
        ("threads answered", f"{one.answered}", f"{many.answered}"),
        ("answered threads with a dead replica's unfinished message", f"{one.left_working}", f"{many.left_working}"),
        ("runs interrupted by the kill (stored)", f"{one.interrupted}", f"{many.interrupted}"),
        ("turns lost (no answer, nothing stored)", f"{one.lost}", f"{many.lost}"),
        ("deliveries through nginx not acknowledged", f"{one.failed_posts}", f"{many.failed_posts}"),
        ("ack latency at nginx p50, ms", fmt(pct(one.acks, 50) * 1000), fmt(pct(many.acks, 50) * 1000)),
        ("ack latency at nginx p99, ms", fmt(pct(one.acks, 99) * 1000), fmt(pct(many.acks, 99) * 1000)),
        ("runs per minute", f"{one.runs_per_minute:.0f}", f"{many.runs_per_minute:.0f}"),
        ("killed replica's running turns at the kill", "-", fmt(many.killed_running, "d") if many.killed_running is not None else "-"),
        (f"seconds until marked interrupted (lease {lease:g} s)", "-", fmt(many.marked_after)),
    ]
    print(f"| {'measure':<46} | {'1 replica':>12} | {label:>22} |")
    print(f"|{'-' * 48}|{'-' * 14}|{'-' * 24}|")
    for name, a, b in rows:
        print(f"| {name:<46} | {a:>12} | {b:>22} |")
    speedup = many.runs_per_minute / one.runs_per_minute if one.runs_per_minute else float("nan")
    dup = max(one.runs_per_thread + many.runs_per_thread or [0]) > 1
    print(f"\nthroughput {many.replicas} replicas / 1 replica: {speedup:.2f}x (target >= {TARGET_SPEEDUP}x with 3; "
          "one replica was killed half-way)")
    print(f"answers per answered thread exactly 1.00: {'NOT met' if dup else 'met'}; turns lost 0: "
          f"{'met' if one.lost == many.lost == 0 else 'NOT met'}; ack p99 < {TARGET_ACK_P99_MS:.0f} ms: "
          f"{'met' if pct(many.acks, 99) * 1000 < TARGET_ACK_P99_MS else 'NOT met'}; marked within the lease: "
          f"{'met' if many.marked_after is not None and many.marked_after <= lease else 'NOT met'}")


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=300)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--latency", type=float, default=2.0, help="seconds per text-to-image call (default 2)")
    ap.add_argument("--lease-seconds", type=float, default=30.0, help="[storage] lease_seconds (default 30)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--database-url", help="PostgreSQL URL shared by both phases (default: SQLite data dirs)")
    where.add_argument("--postgres", action="store_true", help="start a throwaway PostgreSQL server")
    ap.add_argument("--quick", action="store_true", help="30 conversations, lease 6 s (under a minute)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep the replicas' logs and stores there")
    args = ap.parse_args(argv)
    if args.quick:
        args.conversations, args.lease_seconds = min(args.conversations, 30), min(args.lease_seconds, 6.0)
    if args.conversations < 2 or args.replicas < 2:
        ap.error("--conversations and --replicas must be at least 2.")
    if args.lease_seconds < 2:
        ap.error("--lease-seconds must be at least 2 (the store's minimum).")

    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory()) as tmp:
        root = Path(tmp)
        server = None
        try:
            if args.postgres:
                from benchmarks.harness.realparts import Missing, PostgresServer

                try:
                    server = PostgresServer(root / "postgres").start()
                except Missing as e:
                    print(f"Error: {e}", file=sys.stderr)
                    return 2
            stores = []
            for n in (1, 2):
                storage = {"data_dir": str(root / f"data-{n}")}
                if server is not None:
                    storage["database_url"] = server.create_database(f"bench{n}")
                elif args.database_url:
                    storage["database_url"] = args.database_url
                stores.append(storage)
            kind = "PostgreSQL" if server is not None or args.database_url else "SQLite data dir"
            try:
                one = await run_phase(root / "one", stores[0], replicas=1, conversations=args.conversations,
                                      latency=args.latency, lease_seconds=args.lease_seconds, kill=False)
                many = await run_phase(root / "many", stores[1], replicas=args.replicas, conversations=args.conversations,
                                       latency=args.latency, lease_seconds=args.lease_seconds, kill=True)
            except RuntimeError as e:  # a replica did not start: its log says why (e.g. the store refused)
                print(f"Error: a bot replica did not start: {str(e)[-600:]}", file=sys.stderr)
                return 1
        finally:
            if server is not None:
                server.stop()
    report(one, many, latency=args.latency, lease=args.lease_seconds, store=kind)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
