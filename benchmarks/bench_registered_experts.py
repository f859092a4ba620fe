"""What following the expert servers ``hugginggpt experts launch`` registers costs a run
(issue 38 item 8).

    python -m benchmarks.bench_registered_experts [--reads N] [--calls N] [--postgres]

On a real store (SQLite in a temporary data dir; with ``--postgres`` also a throwaway PostgreSQL
server, :class:`benchmarks.harness.realparts.PostgresServer`) holding 3 live records and 1,000
expired ones (a launch that died leaves one), with one stand-in expert server registered:

* ``read``: one read of the live records (:func:`bot.store.sql.experts.live`, the ``expires``
  index), median and p95 in ms: what a process pays at most once per ``[inference] experts_ttl``;
* ``listings``: one :meth:`ExpertServers.listings` call as a run's selection makes it, with the
  listings and the registry both fresh (``experts_ttl`` 10 s), without a registry and with one,
  median µs: the registry's cost on a run's critical path between two re-reads;
* ``amortised``: the read's median divided by the runs of one ``experts_ttl`` at one run a second.

Prints one line per backend and figure.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path


OTHERS = ("http://127.0.0.1:9", "http://127.0.0.1:10")
"""Two more live records: loopback ports where nothing listens (listed as unreachable, cached)."""


def _ms(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=20)
    return f"median {statistics.median(samples) * 1e3:.3f} ms, p95 {q[18] * 1e3:.3f} ms"


async def _fill(database, url: str) -> None:
    """1,000 expired records (launches that died), two live ones elsewhere and ``url``'s."""
    from bot.store.sql.schema import expert_servers as E

    now = time.time()
    rows = [{"url": f"http://gone-{i}.example:8081", "api_key": "k", "job": f"j{i}", "registered": 0.0,
             "expires": 1.0} for i in range(1000)]
    rows += [{"url": u, "api_key": "k", "job": u, "registered": now - i, "expires": now + 3600}
             for i, u in enumerate((url, *OTHERS))]
    async with database.tx("filling") as conn:
        await conn.execute(E.insert().values(rows))


async def _bench(name: str, database, reads: int, calls: int) -> None:
    from bot.store.sql import experts
    from pipeline.catalog.servers import ExpertServers
    from tests.standins.expert_server import ExpertServerStandIn, model

    await database.open()
    with ExpertServerStandIn([model("google/vit-base-patch16-224", "image-classification")]) as es:
        await _fill(database, es.url)
        samples = []
        for _ in range(reads):
            began = time.perf_counter()
            live = await experts.live(database)
            samples.append(time.perf_counter() - began)
        assert len(live) == 3, live
        print(f"{name:<10} read       {_ms(samples)} ({len(live)} live of 1003 rows)")

        plain = ExpertServers([es.url, *OTHERS], ttl=10, timeout=3)  # the same three servers, configured
        followed = ExpertServers([], ttl=10, timeout=3, registry=lambda: experts.live(database))
        out = {}
        for label, servers in (("without", plain), ("with", followed)):
            await servers.listings()  # fill the caches
            times = []
            for _ in range(calls):
                began = time.perf_counter()
                await servers.listings()
                times.append(time.perf_counter() - began)
            out[label] = statistics.median(times)
            await servers.aclose()
        print(f"{name:<10} listings   without a registry {out['without'] * 1e6:.1f} µs, with one "
              f"{out['with'] * 1e6:.1f} µs (median of {calls} cached calls)")
        print(f"{name:<10} amortised  {statistics.median(samples) * 1e3 / 10:.4f} ms per run at one run a second "
              "(experts_ttl 10 s)")
    await database.close()


async def main() -> None:
    """Run the benchmark (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the two dead servers' warnings are expected
    from bot.store.sql.database import DB_NAME, Database

    with tempfile.TemporaryDirectory() as tmp:
        await _bench("sqlite", Database(path=Path(tmp) / DB_NAME), args.reads, args.calls)
        if args.postgres:
            from benchmarks.harness.realparts import PostgresServer

            with PostgresServer(Path(tmp) / "pg") as pg:
                await _bench("postgresql", Database(url=pg.create_database()), args.reads, args.calls)


if __name__ == "__main__":
    asyncio.run(main())
