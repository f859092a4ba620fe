"""What runs cost, in the store: budgets' reservations made atomically, their settling with the
actual cost, and the usage report (table ``spend``, revision 0008).

A reservation is one write transaction: it takes, in a fixed order, one advisory lock per budget
key it checks (PostgreSQL's ``pg_advisory_xact_lock``; on SQLite ``BEGIN IMMEDIATE`` already
serialises every writer, across processes too), sums what each budget's period has spent and
reserved, and inserts or grows the run's row only if none would pass its budget. Two runs checking
one budget are therefore serialised, so together they never pass it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select, update

from ...stored import Limit, Overspent, Payer, Scope, SpendRow
from .dialect import Tx, advisory_lock
from .schema import spend as SP

COUNTED = func.coalesce(SP.c.charged_usd, SP.c.reserved_usd)
"""What a row counts against a budget: its actual known cost once settled, else its reservation."""
EPSILON = 1e-9
"""US dollars of float rounding forgiven when a sum is compared with a budget."""


def _column(scope: Scope) -> Any:
    return {"user": SP.c.user, "channel": SP.c.channel, "team": SP.c.team}[scope]


async def spent(conn: Tx, limit: Limit, *, exclude: str | None = None) -> float:
    """US dollars counted against ``limit`` in its period (``exclude``: a row left out)."""
    stmt = select(func.coalesce(func.sum(COUNTED), 0.0)).where(_column(limit.scope) == limit.key, SP.c.at >= limit.since)
    if exclude is not None:
        stmt = stmt.where(SP.c.id != exclude)
    return float((await conn.execute(stmt)).scalar() or 0.0)


async def reserve(conn: Tx, spend_id: str, payer: Payer, usd: float, limits: Sequence[Limit], *,
                  now: float) -> Overspent | None:
    """Reserve ``usd`` more for the run ``spend_id`` (its row made at the first call) unless a
    budget of ``limits`` is spent or would be passed: refused when what its period counts is at
    the budget already, or would pass it with ``usd`` added.

    Returns:
        ``None`` when reserved; else the first budget refused and what its period had counted.
    """
    for key in sorted({f"spend:{lim.scope}:{lim.key}" for lim in limits}):
        await advisory_lock(conn, key)
    row = (await conn.execute(select(SP.c.reserved_usd).where(SP.c.id == spend_id))).first()
    mine = float(row[0]) if row else 0.0
    for lim in limits:
        counted = await spent(conn, lim, exclude=spend_id) + mine
        if counted >= lim.usd - EPSILON or counted + usd > lim.usd + EPSILON:
            return Overspent(lim, counted)
    if row is None:
        await conn.execute(SP.insert().values(id=spend_id, at=now, platform=payer.platform, user=payer.user,
                                              channel=payer.channel, team=payer.team, reserved_usd=usd))
    else:
        await conn.execute(update(SP).where(SP.c.id == spend_id).values(reserved_usd=SP.c.reserved_usd + usd))
    return None


async def settle(conn: Tx, spend_id: str, *, estimate: float | None, actual: float | None, charged: float,
                 conversation_id: str | None, turn: int | None) -> None:
    """Record the run's actual cost (``charged``: its known part, which now counts instead of the
    reservation) and its turn."""
    await conn.execute(update(SP).where(SP.c.id == spend_id).values(
        estimate_usd=estimate, actual_usd=actual, charged_usd=charged, conversation_id=conversation_id, turn=turn))


def report_query(scope: Scope, since: float, until: float) -> Any:
    """The usage report's query: per id of ``scope``, runs, estimates, charges and unknown costs
    of the runs begun in ``[since, until)``, most charged first."""
    col = _column(scope)
    unknown = func.sum(case((SP.c.charged_usd.is_not(None) & SP.c.actual_usd.is_(None), 1), else_=0))
    return (select(func.coalesce(col, ""), func.count(), func.coalesce(func.sum(SP.c.estimate_usd), 0.0),
                   func.coalesce(func.sum(COUNTED), 0.0), unknown)
            .where(SP.c.at >= since, SP.c.at < until).group_by(col).order_by(func.sum(COUNTED).desc(), col))


def report_rows(rows: Sequence[Any]) -> list[SpendRow]:
    """:class:`SpendRow` objects of :func:`report_query`'s rows."""
    return [SpendRow(str(r[0]), int(r[1]), float(r[2]), float(r[3]), int(r[4] or 0)) for r in rows]
