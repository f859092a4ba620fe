"""``hugginggpt usage [--by user|channel|team] [--day YYYY-MM-DD | --month YYYY-MM] [--csv]``: what
runs cost, per user, per channel or per team (Slack workspace, Discord guild), for one UTC day or
month (default: this month), read from the store the settings choose (every process sharing it
records there, :mod:`bot.budgets`).

Costs are US dollars of known prices (``charged``); a run still going, or whose process died,
counts its reservation; ``unknown`` counts runs one of whose prices is missing.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from bot.settings import Settings
    from bot.stored import SpendRow

CSV_HEADER = ("period", "by", "id", "runs", "estimate_usd", "charged_usd", "unknown_cost_runs")
"""The columns of ``--csv``."""


def _day(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a day as YYYY-MM-DD, not {text!r}") from None


def _month(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%Y-%m").replace(tzinfo=timezone.utc)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a month as YYYY-MM, not {text!r}") from None


def add_parser(subparsers: Any) -> None:
    """Add ``usage`` to the command line's subparsers."""
    p = subparsers.add_parser("usage", help="what runs cost, per user, channel or team, per UTC day or month")
    p.add_argument("--by", choices=("user", "channel", "team"), default="user",
                   help="one line per user, channel or team (Slack workspace, Discord guild); default: user")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--day", type=_day, metavar="YYYY-MM-DD", help="one UTC day")
    when.add_argument("--month", type=_month, metavar="YYYY-MM", help="one UTC month (default: this month)")
    p.add_argument("--csv", action="store_true", help="comma-separated values with a header line")
    p.set_defaults(handler=main)


def period_of(args: argparse.Namespace, now: float) -> tuple[str, float, float]:
    """``(label, since, until)`` of the period asked (epoch seconds, UTC)."""
    from bot.stored import period_bounds

    if args.day is not None:
        since, until = period_bounds("day", args.day.timestamp())
        return args.day.strftime("%Y-%m-%d"), since, until
    start = args.month or datetime.fromtimestamp(now, timezone.utc)
    since, until = period_bounds("month", start.timestamp())
    return start.strftime("%Y-%m"), since, until


def write(rows: list[SpendRow], label: str, by: str, out: TextIO, *, as_csv: bool) -> None:
    """Print the report: CSV (:data:`CSV_HEADER`) or one aligned line per id."""
    if as_csv:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(CSV_HEADER)
        for r in rows:
            w.writerow((label, by, r.key, r.runs, f"{r.estimate_usd:.6f}", f"{r.charged_usd:.6f}", r.unknown))
        return
    if not rows:
        print(f"No runs were charged in {label} (UTC).", file=out)
        return
    print(f"What runs cost in {label} (UTC), by {by}, in US dollars:", file=out)
    width = max(len(r.key or "(none)") for r in rows)
    for r in rows:
        unknown = f", {r.unknown} with an unknown price" if r.unknown else ""
        print(f"  {r.key or '(none)':<{width}}  {r.runs:>5} run{'s' if r.runs != 1 else ' '}  ${r.charged_usd:,.4f}"
              f"  (estimated ${r.estimate_usd:,.4f}{unknown})", file=out)
    print(f"  {'total':<{width}}  {sum(r.runs for r in rows):>5} runs  ${sum(r.charged_usd for r in rows):,.4f}", file=out)


async def main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """``usage``: the report of the period asked, from the store.

    Raises:
        StorageError: the database is unusable.
    """
    from bot.store import MediaStore, open_store  # the store's drivers load when the command runs

    label, since, until = period_of(args, time.time())
    store = await open_store(settings.storage, MediaStore(settings.storage.data_dir))
    try:
        rows = await store.spend_report(args.by, since, until)
    finally:
        await store.close()
    write(rows, label, args.by, out, as_csv=args.csv)
    return 0
