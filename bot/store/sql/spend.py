"""What runs cost, in the store: budgets' reservations made atomically, their settling with the
actual cost, and the usage report (tables ``spend`` and ``spend_total``, revisions 0009 and 0010).

Each run's row counts against every budget period it falls in (its user's, channel's and team's
UTC day and month) as ``coalesce(charged_usd, reserved_usd)``; ``spend_total`` keeps that sum per
budget period, changed in the same transaction as the rows, so a check reads one row per budget
(a sum over the period's runs grew with them: 0.2 ms of CPU at 1,000 runs, 0.9 ms at 5,000).
Every period a run falls in is kept, budgeted or not, so a budget set later counts what was spent.

A reservation is one write transaction: it takes, in a fixed order, one advisory lock per budget
key it checks (PostgreSQL's ``pg_advisory_xact_lock``; on SQLite ``BEGIN IMMEDIATE`` already
serialises every writer, across processes too), reads what each budget's period counts, and grows
the run's row and its periods' totals only if none would pass its budget. Two runs checking one
budget are therefore serialised, so together they never pass it. Totals are changed in sorted
order, so two transactions never wait for each other's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, select, update

from ...stored import PERIODS, SCOPES, Limit, Overspent, Payer, Scope, Settled, SpendRow, period_bounds
from .dialect import insert, prebuilt, sqlite_prebuilt
from .schema import spend as SP
from .schema import spend_total as ST

COUNTED = func.coalesce(SP.c.charged_usd, SP.c.reserved_usd)
"""What a row counts against a budget: its actual known cost once settled, else its reservation."""
EPSILON = 1e-9
"""US dollars of float rounding forgiven when a sum is compared with a budget."""
MAX_LIMITS = len(SCOPES) * len(PERIODS)
"""The most budgets that apply to one run (each scope, each period)."""


def _column(scope: Scope) -> Any:
    return {"user": SP.c.user, "channel": SP.c.channel, "team": SP.c.team}[scope]


def budget_key(scope: Scope, period: str, key: str, since: float) -> str:
    """The ``spend_total.budget`` of ``key``'s budget of ``period`` begun at ``since`` (epoch s)."""
    return f"{scope}:{period}:{int(since)}:{key}"


def _periods(payer: Payer, at: float) -> list[str]:
    """Every budget period a run of ``payer`` begun at ``at`` counts in."""
    out = []
    for period in PERIODS:
        since = period_bounds(period, at)[0]
        out += [budget_key(s, period, k, since) for s in SCOPES if (k := payer.of(s)) is not None]
    return out


def _limit_key(lim: Limit) -> str:
    return budget_key(lim.scope, lim.period, lim.key, lim.since)


_UPSERTS: dict[str, tuple[Any, Any]] = {}


def _upserts(conn: Connection) -> tuple[Any, Any]:
    """The connection's dialect's two upserts, built once: the run's row (its reservation grown;
    returns its ``at``) and a period's total (grown)."""
    if conn.dialect.name not in _UPSERTS:
        row = insert(conn, SP).values(id=bindparam("p_id"), at=bindparam("p_at"), platform=bindparam("p_platform"),
                                      user=bindparam("p_user"), channel=bindparam("p_channel"),
                                      team=bindparam("p_team"), reserved_usd=bindparam("p_usd"))
        row = row.on_conflict_do_update(index_elements=[SP.c.id], set_={
            "reserved_usd": SP.c.reserved_usd + row.excluded.reserved_usd}).returning(SP.c.at)
        total = insert(conn, ST).values(budget=bindparam("p_budget"), counted_usd=bindparam("p_usd"))
        total = total.on_conflict_do_update(index_elements=[ST.c.budget], set_={
            "counted_usd": ST.c.counted_usd + total.excluded.counted_usd})
        _UPSERTS[conn.dialect.name] = (row, total)
    return _UPSERTS[conn.dialect.name]


# statements built once (bindparam placeholders; on SQLite run as SQL compiled once: dialect.prebuilt)
CHECK = select(ST.c.budget, ST.c.counted_usd).where(ST.c.budget.in_([bindparam(f"p_b{i}") for i in range(MAX_LIMITS)]))
"""What the budget periods named by :func:`check_params` count (one primary-key read each)."""
_MINE = select(COUNTED, SP.c.at).where(SP.c.id == bindparam("p_id"))
_INSERT = SP.insert().values(id=bindparam("p_id"), at=bindparam("p_at"), platform=bindparam("p_platform"),
                             user=bindparam("p_user"), channel=bindparam("p_channel"), team=bindparam("p_team"),
                             reserved_usd=bindparam("p_usd"))
_SETTLE = update(SP).where(SP.c.id == bindparam("p_id")).values(
    estimate_usd=bindparam("p_estimate"), actual_usd=bindparam("p_actual"), charged_usd=bindparam("p_charged"),
    conversation_id=bindparam("p_cid"), turn=bindparam("p_turn"))
_LOCK = select(func.pg_advisory_xact_lock(func.hashtext(bindparam("p_key"))))


def _row(spend_id: str, payer: Payer, usd: float, now: float) -> dict[str, Any]:
    return {"p_id": spend_id, "p_at": now, "p_platform": payer.platform, "p_user": payer.user,
            "p_channel": payer.channel, "p_team": payer.team, "p_usd": usd}


def _add(conn: Connection, amounts: Iterable[tuple[str, float]]) -> None:
    """Add each ``(budget, usd)`` to its period's total (made at the first), in one statement run
    once per row, in sorted order."""
    params = [{"p_budget": b, "p_usd": usd} for b, usd in sorted(amounts) if usd]
    if not params:
        return
    stmt = _upserts(conn)[1]
    if conn.dialect.name == "sqlite":  # on the driver's cursor, as dialect.prebuilt
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.executemany(sqlite_prebuilt(conn, stmt, params[0])[0],
                               [sqlite_prebuilt(conn, stmt, p)[1] for p in params])
        finally:
            cursor.close()
    else:
        conn.execute(stmt, params)


def check_params(limits: Sequence[Limit]) -> dict[str, Any]:
    """The parameters of :data:`CHECK` for ``limits`` (at most :data:`MAX_LIMITS`)."""
    keys = [_limit_key(lim) for lim in limits]
    return {f"p_b{i}": keys[i] if i < len(keys) else "" for i in range(MAX_LIMITS)}


def first_spent(rows: Sequence[Any], limits: Sequence[Limit], usd: float = 0.0) -> Overspent | None:
    """The first of ``limits`` that :data:`CHECK`'s ``rows`` find spent (counted at its budget), or
    that ``usd`` more would pass."""
    counted = {budget: float(total) for budget, total in rows}
    for lim in limits:
        spent = counted.get(_limit_key(lim), 0.0)
        if spent >= lim.usd - EPSILON or spent + usd > lim.usd + EPSILON:
            return Overspent(lim, spent)
    return None


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
    if limits:
        over = first_spent(prebuilt(conn, CHECK, check_params(limits)).all(), limits, usd)
        if over is not None:
            return over
    at = prebuilt(conn, _upserts(conn)[0], _row(spend_id, payer, usd, now)).scalar()
    _add(conn, ((b, usd) for b in _periods(payer, at)))
    return None


def settle(conn: Connection, rows: Sequence[Settled]) -> None:
    """Record runs' actual costs (``charged``: the known part, which now counts instead of the
    reservation) and turns, and change their periods' totals by the difference, in one
    transaction; the row is made here for a run that reserved nothing."""
    totals: dict[str, float] = {}
    for r in rows:
        was = prebuilt(conn, _MINE, {"p_id": r.spend_id}).first()
        if was is None:
            prebuilt(conn, _INSERT, _row(r.spend_id, r.payer, 0.0, r.at))
        prebuilt(conn, _SETTLE, {"p_id": r.spend_id, "p_estimate": r.estimate, "p_actual": r.actual,
                                 "p_charged": r.charged, "p_cid": r.conversation_id, "p_turn": r.turn})
        counted, at = (float(was[0]), float(was[1])) if was else (0.0, r.at)
        for b in _periods(r.payer, at):
            totals[b] = totals.get(b, 0.0) + r.charged - counted
    _add(conn, totals.items())


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
