"""Benchmark of the conversation store: planning-context load time and database size per turn.

Builds a store of N conversations x T turns (default 10,000 x 20) with realistic rows (taskbench
requests, answers of several hundred characters, full run records, one file per turn on average),
then times the store's ``context()`` (:class:`bot.store.sql.store.SQLStore` on the SQLite file)
for random conversations through the real async API.

Run: ``python -m benchmarks.bench_store [--conversations N] [--turns T] [--samples S] [--dir D]``

Also (bounded conversation reads): ``context()`` p50/p99 on conversations of 5 and of 320 turns
(``--lengths``; ``--long-conversations`` of each, in a store of their own), warm and on each
conversation's first load in a process, and ``store prune`` with nothing to do on the
N-conversation file, by media size and by age (``--quick``: only these; ``--no-media-rows``: the
file without the media ledger's rows, as this benchmark built it before).

With ``--postgres`` (a throwaway PostgreSQL server from the Debian packages, benchmarks/harness/realparts.py) or
``--database-url URL`` (an empty database), the same rows are copied there and
the same store's ``context()`` on PostgreSQL is timed too, over TCP on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot.store.sql.database import DB_NAME, Database  # noqa: E402
from bot.store.sql.store import SQLStore  # noqa: E402
from bot.store.text import clip_summary  # noqa: E402
from bot.tokens import count_json_tokens, count_tokens  # noqa: E402
from pipeline.tasks.outputs import DetectedObject, Objects  # noqa: E402
from pipeline.types import Output, Resource, RunRecord, Selection, Task, TaskResult  # noqa: E402


class NoMedia:
    """The benchmark never writes media (rows point at content-hash names)."""

    async def put(self, data: bytes, mime: str) -> Path:  # pragma: no cover - unused
        raise RuntimeError("no media writes in the benchmark")


def sqlite_store(data_dir: Path) -> SQLStore:
    """The store on the SQLite file of ``data_dir``, as ``open_store`` makes it."""
    return SQLStore(Database(path=data_dir.resolve() / DB_NAME), data_dir, NoMedia())


def postgres_store(url: str, data_dir: Path) -> SQLStore:
    """The store on the PostgreSQL database ``url``."""
    return SQLStore(Database(url=url), data_dir, NoMedia())


def requests() -> list[str]:
    """TaskBench's user requests (records of the folder's other kinds, without one, are skipped)."""
    out = []
    for f in sorted((ROOT / "tests" / "fixtures" / "taskbench").glob("*.jsonl")):
        records = (json.loads(line) for line in f.read_text().splitlines() if line.strip())
        out += [r["user_request"] for r in records if "user_request" in r]
    return out


ANSWER = (
    "I looked at {name} with an object-detection model (facebook/detr-resnet-50) and found two cats "
    "lying on a pink blanket, with two remote controls next to them. Then I asked an image-to-text "
    "model (Salesforce/blip-image-captioning-large) for a caption: \"two cats sleeping on a couch\". "
    "Workflow: task 0 object-detection on {rid} -> task 1 image-to-text on the same image. The "
    "annotated picture with the boxes is attached as {gen}. Scores were 0.998 and 0.997 for the cats."
)


def run_record(text: str, answer: str, rid: str, gen: Resource) -> str:
    tasks = [Task(0, "object-detection", (), {"image": rid}), Task(1, "image-to-text", (), {"image": rid})]
    sels = {
        0: Selection(0, "facebook/detr-resnet-50", "most downloaded detector with a served endpoint",
                     ("facebook/detr-resnet-50", "hustvl/yolos-tiny"), "llm"),
        1: Selection(1, "Salesforce/blip-image-captioning-large", "the only captioner served", (), "single"),
    }
    res = {
        0: TaskResult(0, "ok", Output(None, [gen], Objects((DetectedObject("cat", 0.998, (13, 52, 314, 470)),) * 4)),
                      "facebook/detr-resnet-50"),
        1: TaskResult(1, "ok", Output("two cats sleeping on a couch"), "Salesforce/blip-image-captioning-large"),
    }
    rec = RunRecord(text, tasks, sels, res, answer, [gen], 3,
                    {"plan": 812.3, "select": 402.1, "execute": 1933.0, "respond": 1220.7}, "ok")
    return json.dumps(rec.to_json(), ensure_ascii=False)


def build(path: Path, conversations: int, turns: int, seed: int = 7, media: bool = True) -> None:
    """Fill the (already migrated) database with bulk inserts in one transaction (``media``: with
    the media ledger's rows, as the store records them; without, as this benchmark built it
    before)."""
    rng = random.Random(seed)
    texts = requests()
    tok = functools.cache(count_tokens)  # requests repeat: count each text once

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("BEGIN")
    now = time.time() - 86400 * 30
    conv_rows, turn_rows, res_rows = [], [], []

    def flush() -> None:
        db.executemany(
            "INSERT INTO conversations(id, key, created, platform, workspace, channel, thread, updated)"
            " VALUES (?,?,?,?,?,?,?,?)", conv_rows)
        db.executemany(
            "INSERT INTO turns(conversation_id, idx, user_text, status, created, user, summary, tokens,"
            " error, finished) VALUES (?,?,?,?,?,?,?,?,?,?)", [r[:3] + r[4:11] for r in turn_rows])
        db.executemany(
            "INSERT INTO turn_records(conversation_id, idx, answer, record) VALUES (?,?,?,?)",
            [(r[0], r[1], r[3], r[11]) for r in turn_rows])
        db.executemany(
            "INSERT INTO resources(conversation_id, n, id, kind, path, mime, size, origin, description, turn, seq,"
            " name, tokens, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", res_rows)
        if media:  # the ledger's row of each file, as add_resource records it (the quota counts them)
            db.executemany("INSERT OR IGNORE INTO media(path, size, created, used) VALUES (?,?,?,?)",
                           [(r[4], r[6], r[13], r[13]) for r in res_rows])
        conv_rows.clear(), turn_rows.clear(), res_rows.clear()

    images = [0] * conversations
    # Turns are written round-robin over conversations (turn 0 of all, then turn 1 ...), as a bot
    # serving many threads at once would: one conversation's rows end up scattered over the file.
    for t in range(turns):
        for c in range(conversations):
            cid = f"{c:010x}"
            t0 = now + c * 60
            if t == 0:
                conv_rows.append((cid, f"discord:guild-{c % 50}:chan-{c % 400}:thread-{c}", t0, "discord",
                                  f"guild-{c % 50}", f"chan-{c % 400}", f"thread-{c}", t0 + turns * 30))
            text = rng.choice(texts)
            ts = t0 + t * 30
            rid = None
            if t % 2 == 0:  # the user sends a photo every other turn
                images[c] += 1
                rid = f"image-{images[c]}"
                r = Resource(rid, "image", Path(), "image/png", 0, "user", f"photo IMG_{t}.png, 451x300 pixels", t,
                             f"IMG_{t}.png")
                res_rows.append((cid, images[c], rid, "image", f"media/{rng.getrandbits(256):064x}.png", "image/png",
                                 200_000 + t, "user", r.description, t, images[c], r.name,
                                 count_json_tokens(r.prompt_view()), ts))
            images[c] += 1
            gen = Resource(f"image-{images[c]}", "image", Path(f"media/{rng.getrandbits(256):064x}.png"),
                           "image/png", 180_000, "task:0", "object-detection boxes drawn on the photo", t)
            res_rows.append((cid, images[c], gen.id, "image", str(gen.path), "image/png", gen.size, gen.origin,
                             gen.description, t, images[c], None, count_json_tokens(gen.prompt_view()), ts + 5))
            answer = ANSWER.format(name=f"IMG_{t}.png", rid=rid or "image-1", gen=gen.id)
            summary = clip_summary(answer)
            turn_rows.append((cid, t, text, answer, "ok", ts, f"user-{c % 97}", summary, tok(text) + tok(summary),
                              None, ts + 4.4, run_record(text, answer, rid or "image-1", gen)))
            if len(turn_rows) >= 20_000:
                flush()
    flush()
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("ANALYZE")
    db.close()


async def measure(store, conversations: int, samples: int, budget: int) -> list[float]:
    """Time ``store.context()`` (the store is opened and closed here) for random conversations."""
    await store.open()
    try:
        ids = [f"{c:010x}" for c in range(conversations)]
        rng = random.Random(1)
        for cid in rng.sample(ids, min(200, len(ids))):  # warm the page cache as a running bot would
            await store.context(cid, budget)
        times = []
        for _ in range(samples):
            cid = rng.choice(ids)
            t = time.perf_counter()
            history, resources = await store.context(cid, budget)
            times.append((time.perf_counter() - t) * 1000)
            assert history and resources
        return times
    finally:
        await store.close()


async def measure_writes(data_dir: Path, conversations: int, samples: int) -> tuple[list[float], float]:
    """Time begin_turn + finish_turn (one transaction each, fsync'd) and a prune pass that
    deletes nothing (it still reads every resource row)."""
    store = sqlite_store(data_dir)
    await store.open()
    try:
        rng = random.Random(3)
        times = []
        for _ in range(samples):
            cid = f"{rng.randrange(conversations):010x}"
            t = time.perf_counter()
            turn = await store.begin_turn(cid, "Now make the cat in image-1 wear a hat.", "U1")
            await store.finish_turn(cid, turn, RunRecord("Now make the cat in image-1 wear a hat.",
                                                         response="Here is the cat with a hat."))
            times.append((time.perf_counter() - t) * 1000)
        return times, (await prune_nothing(store))[0]
    finally:
        await store.close()


async def prune_nothing(store: SQLStore) -> tuple[float, float]:
    """Seconds of a prune pass that deletes nothing: by media size (a quota far above the media),
    then by age (nothing is older than ten years)."""
    out = []
    for age, quota in ((None, 1 << 62), (3650.0, None)):
        t = time.perf_counter()
        report = await store.prune(max_age_days=age, max_media_bytes=quota)
        out.append(time.perf_counter() - t)
        assert report.conversations == 0 and report.files == 0, report
    return out[0], out[1]


async def prune_only(data_dir: Path, repeat: int = 3) -> tuple[list[float], list[float]]:
    """Prune passes with nothing to do on the built file (``repeat`` of each kind)."""
    store = sqlite_store(data_dir)
    await store.open()
    try:
        runs = [await prune_nothing(store) for _ in range(repeat)]
        return [r[0] for r in runs], [r[1] for r in runs]
    finally:
        await store.close()


def bench_lengths(lengths: list[int], conversations: int, samples: int, budget: int) -> None:
    """``context()`` p50/p99 on conversations of each length (a store of their own per length)."""
    for turns in lengths:
        with tempfile.TemporaryDirectory(prefix=f"bench-store-{turns}-") as tmp:
            store = sqlite_store(Path(tmp))

            async def create() -> None:
                await store.open()
                await store.close()

            asyncio.run(create())
            build(store.path, conversations, turns)
            os.sync()
            gc.collect()
            cold = asyncio.run(measure_first(sqlite_store(Path(tmp)), conversations, budget))
            times = asyncio.run(measure(sqlite_store(Path(tmp)), conversations, samples, budget))
            print(f"context(budget={budget} tokens) at {turns} turns, {len(times)} random of {conversations}"
                  f" conversations: p50 {statistics.median(times):.3f} ms, p99 {pct(times, 99):.3f} ms,"
                  f" max {max(times):.3f} ms; a conversation's first load in a process: p50"
                  f" {statistics.median(cold):.3f} ms, p99 {pct(cold, 99):.3f} ms", flush=True)


async def measure_first(store: SQLStore, conversations: int, budget: int) -> list[float]:
    """Time the first ``context()`` of each conversation in a freshly opened store (nothing of it
    kept in the process yet; the file's pages are in the OS cache)."""
    await store.open()
    try:
        times = []
        for c in range(conversations):
            t = time.perf_counter()
            await store.context(f"{c:010x}", budget)
            times.append((time.perf_counter() - t) * 1000)
        return times
    finally:
        await store.close()


TABLES = ("conversations", "turns", "turn_records", "resources")


async def copy_to_postgres(sqlite_path: Path, url: str) -> float:
    """Migrate the empty database at ``url`` and copy the built rows into it (COPY); seconds taken."""
    import asyncpg

    store = postgres_store(url, sqlite_path.parent)
    await store.open()
    await store.close()
    t = time.perf_counter()
    src = sqlite3.connect(sqlite_path)
    conn = await asyncpg.connect(url)
    try:
        for table in TABLES:
            cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
            cur = src.execute(f"SELECT {', '.join(cols)} FROM {table}")
            while rows := cur.fetchmany(20_000):
                await conn.copy_records_to_table(table, records=rows, columns=cols)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
        src.close()
    return time.perf_counter() - t


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--budget", type=int, default=1500, help="context tokens ([storage] context_tokens)")
    ap.add_argument("--dir", type=Path, default=None, help="data directory (default: a temporary one)")
    ap.add_argument("--postgres", action="store_true", help="also time PostgreSQL (a throwaway server)")
    ap.add_argument("--database-url", default=None, help="also time PostgreSQL on this empty database")
    ap.add_argument("--lengths", default="5,320", help="conversation lengths (turns) to time context() at")
    ap.add_argument("--long-conversations", type=int, default=40,
                    help="conversations of each length (40 x 320 turns: 19,200 resources, within what a process keeps)")
    ap.add_argument("--no-media-rows", action="store_true", help="build without the media table's rows")
    ap.add_argument("--quick", action="store_true", help="only context() by length and prune with nothing to do")
    args = ap.parse_args(argv)
    bench_lengths([int(n) for n in args.lengths.split(",") if n], args.long_conversations, args.samples, args.budget)

    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        data_dir = args.dir or Path(tmp)
        store = sqlite_store(data_dir)

        async def create() -> None:  # the schema, as a first start makes it
            await store.open()
            await store.close()

        asyncio.run(create())
        t = time.perf_counter()
        build(store.path, args.conversations, args.turns, media=not args.no_media_rows)
        build_s = time.perf_counter() - t
        n_turns = args.conversations * args.turns
        size = store.path.stat().st_size
        db = sqlite3.connect(store.path)
        plans = [
            db.execute("EXPLAIN QUERY PLAN SELECT idx, user_text, summary, status, tokens FROM turns"
                       " WHERE conversation_id=? AND status != 'running' ORDER BY idx DESC", ("x",)).fetchall(),
            db.execute("EXPLAIN QUERY PLAN SELECT id FROM resources WHERE conversation_id=?"
                       " ORDER BY n", ("x",)).fetchall(),
        ]
        n_res = db.execute("SELECT count(*) FROM resources").fetchone()[0]
        rec_bytes = db.execute("SELECT avg(length(CAST(record AS BLOB))) FROM turn_records").fetchone()[0]
        db.close()
        print(f"built {args.conversations} conversations x {args.turns} turns ({n_turns} turns, {n_res} resources)"
              f" in {build_s:.1f} s")
        if args.quick:
            by_size, by_age = asyncio.run(prune_only(data_dir))
            print(f"store prune with nothing to do on {args.conversations} conversations: by media size"
                  f" {min(by_size) * 1000:.1f} ms (worst {max(by_size) * 1000:.1f}), by age {min(by_age) * 1000:.1f} ms"
                  f" (worst {max(by_age) * 1000:.1f}); {len(by_size)} passes each")
            return 0
        print(f"database size: {size / 1e6:.1f} MB = {size / n_turns:.0f} bytes per turn"
              " (turn row with full run record JSON + its resource rows + indexes);"
              f" of which run record JSON {rec_bytes:.0f} bytes")
        for p in plans:
            print("query plan:", "; ".join(row[-1] for row in p))
        # Measure in steady state: the build's dirty pages written back, its garbage collected.
        os.sync()
        gc.collect()
        for budget in (args.budget, 100_000):
            times = asyncio.run(measure(sqlite_store(data_dir), args.conversations, args.samples, budget))
            print(f"context(budget={budget} tokens), {len(times)} random conversations:"
                  f" p50 {statistics.median(times):.3f} ms, p99 {pct(times, 99):.3f} ms, max {max(times):.3f} ms")
        writes, prune_s = asyncio.run(measure_writes(data_dir, args.conversations, min(args.samples, 300)))
        print(f"begin_turn + finish_turn, {len(writes)} turns: p50 {statistics.median(writes):.3f} ms,"
              f" p99 {pct(writes, 99):.3f} ms (synchronous=FULL: includes fsync)")
        print(f"prune by media size with nothing to delete: {prune_s * 1000:.0f} ms")
        if args.postgres or args.database_url:
            bench_postgres(args, data_dir, store.path, Path(tmp))
    return 0


def bench_postgres(args: argparse.Namespace, data_dir: Path, sqlite_path: Path, tmp: Path) -> None:
    """Copy the built rows to PostgreSQL and time ``context()`` there."""
    server = None
    url = args.database_url
    if url is None:
        from benchmarks.harness.realparts import PostgresServer

        server = PostgresServer(tmp / "postgres").start()
        url = server.create_database("bench")
    try:
        copy_s = asyncio.run(copy_to_postgres(sqlite_path, url))
        print(f"PostgreSQL: copied the rows in {copy_s:.1f} s")
        for budget in (args.budget, 100_000):
            times = asyncio.run(measure(postgres_store(url, data_dir), args.conversations, args.samples, budget))
            print(f"PostgreSQL context(budget={budget} tokens), {len(times)} random conversations:"
                  f" p50 {statistics.median(times):.3f} ms, p99 {pct(times, 99):.3f} ms, max {max(times):.3f} ms")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
