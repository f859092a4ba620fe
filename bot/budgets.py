"""Budgets (``[budgets]``) and what each run is charged, shared by every process on the store.

A run of a requester is charged to its user, its channel and its team (Slack workspace, Discord
guild), each as ``"platform:id"``. Per UTC day and per UTC month each may have a budget in US
dollars. The rules:

1. before the run: refused when a budget that applies is spent already (the run's row is made,
   reserving nothing);
2. after planning (and after each re-planning round), before any task runs: the estimate's known
   part (:attr:`pipeline.cost.Cost.known_usd`) is reserved atomically
   (:meth:`bot.store.protocol.Spending.reserve_spend`); refused when it would pass a budget;
3. after the run: the reservation is replaced by the actual cost's known part
   (:func:`pipeline.cost.actual_cost`), whatever the run's outcome.

Each refusal is one sentence naming the budget and when it resets ("This channel's daily budget
of $5.00 is spent; it resets at 00:00 UTC."). A price that is unknown is neither reserved nor
charged (budgets count dollars whose price is known): set the prices of what a team uses.
"""

from __future__ import annotations

import calendar
import logging
import secrets
import time
from collections.abc import Sequence
from datetime import datetime, timezone

from pipeline.cost import Cost, dollars
from pipeline.types import RunRecord, Task

from .errors import Refused, StorageError
from .incoming import Requester
from .settings import BudgetSettings
from .store.protocol import Spending
from .stored import Limit, Overspent, Payer, Scope

log = logging.getLogger(__name__)

SCOPES: tuple[Scope, ...] = ("user", "channel", "team")
PERIODS = ("day", "month")
BUDGET_REFUSED = "budget"
"""The :attr:`bot.errors.Refused.reason` of a budget's refusal."""


def payer_of(who: Requester) -> Payer:
    """Who a requester's runs are charged to: its user, its channel (a thread's parent is the
    channel when the platform names it first) and its team, each ``"platform:id"``."""
    p = who.platform
    channel = who.channels[-1] if who.channels else None
    return Payer(p, f"{p}:{who.user}", f"{p}:{channel}" if channel else None,
                 f"{p}:{who.workspace}" if who.workspace else None)


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """``(start, end)`` epoch seconds of the UTC day or month holding ``now``."""
    t = datetime.fromtimestamp(now, timezone.utc)
    if period == "day":
        start = datetime(t.year, t.month, t.day, tzinfo=timezone.utc)
        return start.timestamp(), start.timestamp() + 86400.0
    start = datetime(t.year, t.month, 1, tzinfo=timezone.utc)
    days = calendar.monthrange(t.year, t.month)[1]
    return start.timestamp(), start.timestamp() + days * 86400.0


def limits_for(budgets: BudgetSettings, payer: Payer, now: float) -> list[Limit]:
    """The budgets of ``budgets`` that apply to ``payer`` now (a scope the payer lacks has none)."""
    out = []
    for scope in SCOPES:
        key = payer.of(scope)
        for period in PERIODS:
            usd = getattr(budgets, f"per_{scope}_{period}")
            if usd is not None and key is not None:
                since, until = period_bounds(period, now)
                out.append(Limit(scope, key, period, float(usd), since, until))  # type: ignore[arg-type]
    return out


def _whose(limit: Limit, platform: str) -> str:
    if limit.scope == "user":
        return "your"
    if limit.scope == "channel":
        return "this channel's"
    return {"slack": "this workspace's", "discord": "this server's"}.get(platform, "this team's")


def _resets(limit: Limit) -> str:
    if limit.period == "day":
        return "it resets at 00:00 UTC"
    end = datetime.fromtimestamp(limit.until, timezone.utc)
    return f"it resets on {end.day} {end.strftime('%B')} at 00:00 UTC"


def refusal_sentence(over: Overspent, platform: str, estimate: float | None = None) -> str:
    """The one sentence refusing a run (``estimate`` ``None``: refused before planning, the budget
    is spent) or a plan (its estimate would pass the budget)."""
    lim = over.limit
    budget = f"{'daily' if lim.period == 'day' else 'monthly'} budget of {dollars(lim.usd)}"
    whose = _whose(lim, platform)
    if estimate is None:
        return f"{whose[0].upper()}{whose[1:]} {budget} is spent; {_resets(lim)}."
    return (f"This plan's estimated cost of {dollars(estimate)} would pass {whose} {budget} "
            f"({dollars(over.spent)} spent); {_resets(lim)}.")


def cost_footer(record: RunRecord) -> str:
    """The answer's cost line (``[prices] show_cost``), e.g. ``"Cost: $0.0123 (estimated $0.0150)."``;
    ``""`` when the pipeline has no prices."""
    if record.cost is None:
        return ""
    est = record.estimate.usd if record.estimate is not None else None
    actual = record.cost.usd
    if actual is None:
        return f"Cost: unknown (a price is missing; {dollars(record.cost.known_usd)} known, estimated {dollars(est)})."
    return f"Cost: {dollars(actual)} (estimated {dollars(est)})."


class Charge:
    """The spending of one run (made by :meth:`Budgets.open`): its estimate reserved by
    :meth:`gate`, its actual cost recorded by :meth:`settle`."""

    def __init__(self, store: Spending, payer: Payer, limits: Sequence[Limit]) -> None:
        self.store, self.payer, self.limits = store, payer, list(limits)
        self.id = secrets.token_hex(8)

    async def gate(self, tasks: tuple[Task, ...], estimate: Cost | None) -> None:
        """Reserve ``estimate``'s known part (:data:`pipeline.run.PlanGate`).

        Raises:
            Refused: reason ``"budget"``, a budget would be passed (one sentence).
            StorageError: the store failed.
        """
        usd = estimate.known_usd if estimate is not None else 0.0
        over = await self.store.reserve_spend(self.id, self.payer, usd, self.limits)
        if over is not None:
            log.info("budget refused a plan of %d tasks (%.6f USD) for %s: %s", len(tasks), usd, over.limit.key, over)
            raise Refused(BUDGET_REFUSED, refusal_sentence(over, self.payer.platform, usd))

    async def settle(self, record: RunRecord) -> None:
        """Record the run's estimate and actual cost (its known part now counts instead of the
        reservation). Never raises: a store failure is logged (the reservation keeps counting)."""
        est = record.estimate.usd if record.estimate is not None else None
        cost = record.cost
        try:
            await self.store.settle_spend(self.id, estimate=est, actual=cost.usd if cost else None,
                                          charged=cost.known_usd if cost else 0.0,
                                          conversation_id=record.conversation_id, turn=record.turn)
        except StorageError as e:
            log.error("could not record the cost of run %s (its reservation keeps counting): %s", self.id, e)


class Budgets:
    """The budgets of ``settings`` on a store shared by every process (``None``: no store, nothing
    charged or recorded)."""

    def __init__(self, settings: BudgetSettings, store: Spending | None, clock=time.time) -> None:
        self.settings, self.store, self.clock = settings, store, clock

    async def open(self, who: Requester | None) -> Charge | None:
        """The run's charge, its row made (reserving nothing); ``None`` without a store or a
        requester (nothing is charged).

        Raises:
            Refused: reason ``"budget"``, a budget that applies is spent (one sentence).
            StorageError: the store failed and a budget applies (without one, the run goes on
                uncharged, logged).
        """
        if self.store is None or who is None:
            return None
        payer = payer_of(who)
        limits = limits_for(self.settings, payer, self.clock())
        charge = Charge(self.store, payer, limits)
        try:
            over = await self.store.reserve_spend(charge.id, payer, 0.0, limits)
        except StorageError as e:
            if limits:
                raise
            log.warning("could not record a run's cost (it runs uncharged): %s", e)
            return None
        if over is not None:
            log.info("budget refused a run for %s: %s", over.limit.key, over)
            raise Refused(BUDGET_REFUSED, refusal_sentence(over, payer.platform))
        return charge
