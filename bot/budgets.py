"""Budgets (``[budgets]``) and what each run is charged, shared by every process on the store.

A run of a requester is charged to its user, its channel and its team (Slack workspace, Discord
guild), each as ``"platform:id"``. Per UTC day and per UTC month each may have a budget in US
dollars. The rules:

1. before the run: refused when a budget that applies is spent already (a read);
2. after planning (and after each re-planning round), before any task runs: the estimate's known
   part (:attr:`pipeline.cost.Cost.known_usd`) is reserved atomically
   (:meth:`bot.store.protocol.Spending.reserve_spend`); refused when it would pass a budget;
3. after the run: the reservation is replaced by the actual cost's known part
   (:func:`pipeline.cost.actual_cost`), whatever the run's outcome (written with the other runs
   settled within :data:`FLUSH_SECONDS`, one transaction for them all).

Each refusal is one sentence naming the budget and when it resets ("This channel's daily budget
of $5.00 is spent; it resets at 00:00 UTC."). A price that is unknown is neither reserved nor
charged (budgets count dollars whose price is known): set the prices of what a team uses.
"""

from __future__ import annotations

import asyncio
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
from .stored import PERIODS, SCOPES, Limit, Overspent, Payer, Settled, period_bounds

log = logging.getLogger(__name__)

BUDGET_REFUSED = "budget"
"""The :attr:`bot.errors.Refused.reason` of a budget's refusal."""


def payer_of(who: Requester) -> Payer:
    """Who a requester's runs are charged to: its user, its channel (a thread's parent is the
    channel when the platform names it first) and its team, each ``"platform:id"``."""
    p = who.platform
    channel = who.channels[-1] if who.channels else None
    return Payer(p, f"{p}:{who.user}", f"{p}:{channel}" if channel else None,
                 f"{p}:{who.workspace}" if who.workspace else None)


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


FLUSH_SECONDS = 2.0
"""Seconds a settled run's cost waits to be written with the others settled meanwhile (one
transaction for them all); until then its reservation counts, which is never less safe."""
FLUSH_ROWS = 64
"""Settled runs that are written at once, without waiting."""


class Charge:
    """The spending of one run (made by :meth:`Budgets.open`): its estimate reserved by
    :meth:`gate`; its actual cost handed to :meth:`Budgets.settle`."""

    def __init__(self, store: Spending, payer: Payer, limits: Sequence[Limit], now: float) -> None:
        self.store, self.payer, self.limits, self.at = store, payer, list(limits), now
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

    def settled(self, record: RunRecord) -> Settled:
        """What the run of ``record`` cost, to record."""
        cost = record.cost
        return Settled(self.id, self.payer, self.at, record.estimate.usd if record.estimate is not None else None,
                       cost.usd if cost else None, cost.known_usd if cost else 0.0, record.conversation_id,
                       record.turn)


class Budgets:
    """The budgets of ``settings`` on a store shared by every process (``None``: no store, nothing
    charged or recorded). Settled costs are written together (:data:`FLUSH_SECONDS`,
    :data:`FLUSH_ROWS`); :meth:`flush` writes what waits (the service calls it when it closes)."""

    def __init__(self, settings: BudgetSettings, store: Spending | None, clock=time.time) -> None:
        self.settings, self.store, self.clock = settings, store, clock
        self._pending: list[Settled] = []
        self._flusher: asyncio.Task[None] | None = None

    async def open(self, who: Requester | None) -> Charge | None:
        """The run's charge (its row is made by its reservation or when it is settled); ``None``
        without a store or a requester (nothing is charged). A budget that applies is checked
        (one read).

        Raises:
            Refused: reason ``"budget"``, a budget that applies is spent (one sentence).
            StorageError: the store failed and a budget applies.
        """
        if self.store is None or who is None:
            return None
        payer, now = payer_of(who), self.clock()
        limits = limits_for(self.settings, payer, now)
        over = await self.store.check_spend(payer, limits)
        if over is not None:
            log.info("budget refused a run for %s: %s", over.limit.key, over)
            raise Refused(BUDGET_REFUSED, refusal_sentence(over, payer.platform))
        return Charge(self.store, payer, limits, now)

    def settle(self, charge: Charge, record: RunRecord) -> None:
        """Record the run's estimate and actual cost (written within :data:`FLUSH_SECONDS`, its
        reservation counting until then). Never raises."""
        self._pending.append(charge.settled(record))
        if len(self._pending) >= FLUSH_ROWS:
            asyncio.ensure_future(self.flush())
        elif self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_SECONDS)
        await self.flush()

    async def flush(self) -> None:
        """Write the settled costs that wait, in one transaction. Never raises: a store failure is
        logged (their reservations keep counting)."""
        rows, self._pending = self._pending, []
        if not rows or self.store is None:
            return
        try:
            await self.store.settle_spends(rows)
        except StorageError as e:
            log.error("could not record the cost of %d runs (their reservations keep counting): %s", len(rows), e)

    async def close(self) -> None:
        """Stop waiting and write what waits."""
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self.flush()
