"""What each budget's period has counted, kept as it changes:

* ``spend_total``: one row per budget period (``budget``: ``"scope:period:since:key"``, e.g.
  ``"channel:day:1795737600:slack:C1"``), the sum of what its runs count
  (``coalesce(charged_usd, reserved_usd)`` of ``spend``). A reservation and a settling change it
  in their own transaction, so checking a budget is one primary-key read instead of a sum over
  every run of the period (which grew with the period's runs: 0.9 ms of CPU at 5,000 runs).
  Filled here from the runs of the current and the last month.
* ``spend``'s indexes per user, channel and team go: only those sums used them (the usage report
  reads by ``at``), and each cost every reservation three more pages written.

Revision ID: 0010
Revises: 0009
"""

import time
from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _since(period: str, at: float) -> int:
    t = datetime.fromtimestamp(at, timezone.utc)
    start = datetime(t.year, t.month, t.day if period == "day" else 1, tzinfo=timezone.utc)
    return int(start.timestamp())


def upgrade() -> None:
    total = op.create_table(
        "spend_total",
        sa.Column("budget", sa.Text, primary_key=True),
        sa.Column("counted_usd", sa.Float, nullable=False),
    )
    sums: dict[str, float] = {}
    spend = sa.table("spend", *(sa.column(c) for c in ("at", "user", "channel", "team", "charged_usd", "reserved_usd")))
    c = spend.c
    rows = op.get_bind().execute(sa.select(c.at, c.user, c.channel, c.team,
                                           sa.func.coalesce(c.charged_usd, c.reserved_usd))
                                 .where(c.at >= time.time() - 62 * 86400))
    for at, *keys, counted in rows:
        for scope, key in zip(("user", "channel", "team"), keys):
            for period in ("day", "month") if key is not None else ():
                budget = f"{scope}:{period}:{_since(period, at)}:{key}"
                sums[budget] = sums.get(budget, 0.0) + float(counted)
    if sums:
        op.bulk_insert(total, [{"budget": b, "counted_usd": usd} for b, usd in sums.items()])
    for scope in ("user", "channel", "team"):
        op.drop_index(f"spend_{scope}", "spend")


def downgrade() -> None:
    for scope in ("user", "channel", "team"):
        op.create_index(f"spend_{scope}", "spend", [scope, "at"])
    op.drop_table("spend_total")
