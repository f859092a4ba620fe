"""What runs cost, in the store: budgets' reservations made atomically, their settling with the
actual cost, and the usage report (table ``spend``, revision 0009).

A reservation is one write transaction: it takes, in a fixed order, one advisory lock per budget
key it checks (PostgreSQL's ``pg_advisory_xact_lock``; on SQLite ``BEGIN IMMEDIATE`` already
serialises every writer, across processes too), sums what each budget's period has spent and
reserved, and inserts or grows the run's row only if none would pass its budget. Two runs checking
one budget are therefore serialised, so together they never pass it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, select, update

from ...stored import Limit, Overspent, Payer, Scope, Settled, SpendRow
from .dialect import prebuilt
from .schema import spend as SP

COUNTED = func.coalesce(SP.c.charged_usd, SP.c.reserved_usd)
"""What a row counts against a budget: its actual known cost once settled, else its reservation."""
EPSILON = 1e-9
"""US dollars of float rounding forgiven when a sum is compared with a budget."""


def _column(scope: Scope) -> Any:
    return {"user": SP.c.user, "channel": SP.c.channel, "team": SP.c.team}[scope]


# statements built once (bindparam placeholders; on SQLite run as SQL compiled once: dialect.prebuilt)
_SPENT = {scope: select(func.coalesce(func.sum(COUNTED), 0.0)).where(
    _column(scope) == bindparam("p_key"), SP.c.at >= bindparam("p_since"), SP.c.id != bindparam("p_id"))
    for scope in ("user", "channel", "team")}
_MINE = select(SP.c.reserved_usd).where(SP.c.id == bindparam("p_id"))
_INSERT = SP.insert().values(id=bindparam("p_id"), at=bindparam("p_at"), platform=bindparam("p_platform"),
                             user=bindparam("p_user"), channel=bindparam("p_channel"), team=bindparam("p_team"),
                             reserved_usd=bindparam("p_usd"))
_GROW = update(SP).where(SP.c.id == bindparam("p_id")).values(reserved_usd=SP.c.reserved_usd + bindparam("p_usd"))
_SETTLE = update(SP).where(SP.c.id == bindparam("p_id")).values(
    estimate_usd=bindparam("p_estimate"), actual_usd=bindparam("p_actual"), charged_usd=bindparam("p_charged"),
    conversation_id=bindparam("p_cid"), turn=bindparam("p_turn"))
_COUNTED_SINCE = {(scope, period): select(func.coalesce(func.sum(COUNTED), 0.0)).where(
    _column(scope) == bindparam(f"p_{scope}"), SP.c.at >= bindparam(f"p_{scope}_{period}")).scalar_subquery()
    for scope in ("user", "channel", "team") for period in ("day", "month")}
CHECK = select(*_COUNTED_SINCE.values())
"""What each (scope, period) of :data:`_COUNTED_SINCE` counts, in one read (:func:`check_params`)."""
_LOCK = select(func.pg_advisory_xact_lock(func.hashtext(bindparam("p_key"))))


def _row(spend_id: str, payer: Payer, usd: float, now: float) -> dict[str, Any]:
    return {"p_id": spend_id, "p_at": now, "p_platform": payer.platform, "p_user": payer.user,
            "p_channel": payer.channel, "p_team": payer.team, "p_usd": usd}


def reserve(conn: Connection, spend_id: str, payer: Payer, usd: float, limits: Sequence[Limit], *,
            now: float) -> Overspent | None:
    """Reserve ``usd`` more for the run ``spend_id`` (its row made at the first call) unless a
    budget of ``limits`` is spent or would be passed: refused when what its period counts is at
    the budget already, or would pass it with ``usd`` added. One transaction
    (:meth:`bot.store.sql.database.Database.run`); on PostgreSQL it first takes one advisory lock
    per budget, in a fixed order.

    Returns:
        ``None`` when reserved; else the first budget refused and what its period had counted.
    """
    if conn.dialect.name != "sqlite":  # SQLite: BEGIN IMMEDIATE already excludes every other writer
        for key in sorted({f"spend:{lim.scope}:{lim.key}" for lim in limits}):
            conn.execute(_LOCK, {"p_key": key})
    row = prebuilt(conn, _MINE, {"p_id": spend_id}).first()
    mine = float(row[0]) if row else 0.0
    for lim in limits:
        counted = float(prebuilt(conn, _SPENT[lim.scope], {"p_key": lim.key, "p_since": lim.since,
                                                           "p_id": spend_id}).scalar() or 0.0) + mine
        if counted >= lim.usd - EPSILON or counted + usd > lim.usd + EPSILON:
            return Overspent(lim, counted)
    if row is None:
        prebuilt(conn, _INSERT, _row(spend_id, payer, usd, now))
    else:
        prebuilt(conn, _GROW, {"p_id": spend_id, "p_usd": usd})
    return None


def settle(conn: Connection, rows: Sequence[Settled]) -> None:
    """Record runs' actual costs (``charged``: the known part, which now counts instead of the
    reservation) and turns, in one transaction; the row is made here for a run that reserved
    nothing."""
    for r in rows:
        values = {"p_id": r.spend_id, "p_estimate": r.estimate, "p_actual": r.actual, "p_charged": r.charged,
                  "p_cid": r.conversation_id, "p_turn": r.turn}
        if prebuilt(conn, _SETTLE, values).rowcount == 0:
            prebuilt(conn, _INSERT, _row(r.spend_id, r.payer, 0.0, r.at))
            prebuilt(conn, _SETTLE, values)


def check_params(payer: Payer, limits: Sequence[Limit]) -> dict[str, Any]:
    """The parameters of :data:`CHECK` for ``payer``'s ``limits`` (a scope without a limit matches
    no row)."""
    params: dict[str, Any] = {}
    for scope in ("user", "channel", "team"):
        params[f"p_{scope}"] = payer.of(scope)  # type: ignore[arg-type]
        for period in ("day", "month"):
            lim = next((lim for lim in limits if lim.scope == scope and lim.period == period), None)
            params[f"p_{scope}_{period}"] = lim.since if lim is not None else float("inf")
    return params


def first_spent(row: Sequence[Any], limits: Sequence[Limit]) -> Overspent | None:
    """The first of ``limits`` that :data:`CHECK`'s ``row`` finds spent (counted at its budget)."""
    keys = list(_COUNTED_SINCE)
    for lim in limits:
        counted = float(row[keys.index((lim.scope, lim.period))] or 0.0)
        if counted >= lim.usd - EPSILON:
            return Overspent(lim, counted)
    return None


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
