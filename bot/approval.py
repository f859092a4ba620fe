"""Plan approval (``[planning] approve``): a plan that needs a person's yes waits, stored, until
its requester (or an approver) presses Run or Cancel, or it expires.

A turn is two phases. The first plans and ends with :class:`ApprovalNeeded` (nothing run, the
turn's status ``"awaiting approval"``); the plan is kept in the store (:class:`PendingPlans`), so a
restart during the wait loses nothing. Pressing Run is a new turn (:class:`Approve` on the
:class:`bot.incoming.Message`) that runs the kept plan as is (``Request.plan``), less the steps
dropped with :func:`drop_steps` and everything that depends on them.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cachetools import TTLCache

from pipeline.cost import dollars
from pipeline.types import PLACEHOLDER, Task, placeholder_id

from .errors import InputError, Refused
from .incoming import Approve, ConversationKey, Requester
from .settings import PlanningSettings

__all__ = ["Approve"]  # what a Run press carries (bot.incoming, where Message is)

EXPIRED = "This plan waited longer than its time for approval and expired; nothing was run. Please ask again."
GONE = "This plan was already run or cancelled."
NOT_YOURS = "Only the person who asked (or an approver of this bot) can run or cancel this plan."
CANCELLED = "The plan was cancelled; nothing was run."
WAITING = "This plan waits for approval before anything runs: press Run, Cancel, or drop a step."
NO_TERMINAL = ("This plan needs approval and there is no terminal to ask on; run it again with --yes to approve "
               "it, or set [planning] approve = \"never\".")
MEMORY_PLANS = 1000
"""Plans kept waiting by a process without a conversation store (``hugginggpt run``), at most."""


def needs_approval(tasks: Sequence[Task], estimate_usd: float | None, settings: PlanningSettings) -> bool:
    """Whether a validated plan waits for a person before it runs.

    Args:
        tasks: the plan (an empty plan, a direct answer, never waits).
        estimate_usd: its estimated cost in US dollars; ``None`` when unknown (a missing price is
            never zero: a plan of unknown cost asks in ``"costly"`` mode).
        settings: ``[planning]`` (``approve``, ``approve_above_usd``, ``approve_tasks``).

    Returns:
        ``True`` when it must wait (approval before any tool runs).
    """
    if not tasks or settings.approve == "never":
        return False
    if settings.approve == "always" or any(t.task in settings.approve_tasks for t in tasks):
        return True
    return estimate_usd is None or estimate_usd > settings.approve_above_usd


def needs_of(task: Task) -> set[int]:
    """The ids of the tasks ``task`` needs: its ``dep`` and every ``<resource>-N`` of its arguments."""
    return set(task.dep) | {placeholder_id(m) for v in task.args.values() for m in PLACEHOLDER.finditer(v)}


def drop_steps(tasks: Sequence[Task], dropped: Iterable[int]) -> tuple[tuple[Task, ...], dict[int, int]]:
    """The plan without the ``dropped`` task ids and every task that needs one of them, transitively.

    Returns:
        ``(kept tasks in order, {removed task id: the dropped id it was removed for})``; a dropped
        id not in the plan is ignored.
    """
    ids = {t.id for t in tasks}
    removed = {d: d for d in dropped if d in ids}
    changed = True
    while changed:
        changed = False
        for t in tasks:
            if t.id not in removed:
                cause = next((removed[n] for n in sorted(needs_of(t)) if n in removed), None)
                if cause is not None:
                    removed[t.id], changed = cause, True
    return tuple(t for t in tasks if t.id not in removed), removed


def dropped_sentence(tasks: Sequence[Task], removed: dict[int, int]) -> str:
    """One sentence naming the steps left out: ``Dropped as asked: step 1 (text-to-video); and,
    because they needed it, step 2 (image-to-text).``; ``""`` when none."""
    if not removed:
        return ""
    names = {t.id: t.task for t in tasks}
    asked = [f"step {i} ({names[i]})" for i in sorted(removed) if removed[i] == i]
    needing = [f"step {i} ({names[i]}, needed step {removed[i]})" for i in sorted(removed) if removed[i] != i]
    sentence = "Dropped as asked: " + ", ".join(asked)
    if needing:
        sentence += "; and, because they needed a dropped step: " + ", ".join(needing)
    return sentence + "."


def cost_line(estimate_usd: float | None) -> str:
    """The estimate as a plan display shows it: ``cost: unknown`` or ``cost: about $0.0123``, written
    as budgets and the cost footer write dollars (:func:`pipeline.cost.dollars`: a sub-cent plan is
    not shown as ``$0.00``)."""
    return "cost: unknown" if estimate_usd is None else f"cost: about {dollars(estimate_usd)}"


def plan_lines(tasks: Sequence[Task]) -> list[str]:
    """One line per step for a plan display: ``1. text-to-video (text: "a cat", after 0)``."""
    lines = []
    for t in tasks:
        args = ", ".join(f"{k}: {v[:60]!r}" for k, v in t.args.items())
        needs = sorted(needs_of(t))
        lines.append(f"{t.id}. {t.task} ({args})" + (f", needs step {', '.join(map(str, needs))}" if needs else ""))
    return lines


@dataclass(frozen=True)
class ApprovalNeeded:
    """The run's plan waits for a person (the last event before ``Done``, whose record's status is
    ``"awaiting approval"``).

    Attributes:
        plan_id: what Run / Cancel carry (a button's value, a custom id, the HTTP API's call).
        tasks: the plan.
        estimate_usd: its estimate in US dollars, ``None`` when unknown.
        expires: when the wait ends, epoch seconds.
        requester: the user id of who asked.
    """

    plan_id: str
    tasks: tuple[Task, ...]
    estimate_usd: float | None
    expires: float
    requester: str

    def text(self) -> str:
        """The plan as plain text: its steps, the estimate and what to do."""
        return "\n".join([*plan_lines(self.tasks), cost_line(self.estimate_usd), WAITING])


@dataclass(frozen=True)
class PendingPlan:
    """A kept plan: what the turn that runs it needs.

    Attributes:
        plan_id, tasks, estimate_usd, expires, requester: as :class:`ApprovalNeeded`.
        text: the request's text.
        file_ids: the resource ids of the request's files (kept in the conversation).
        key: the conversation (``None`` for a one-off run, kept in this process only).
        files: the one-off run's files themselves (not stored).
    """

    plan_id: str
    tasks: tuple[Task, ...]
    estimate_usd: float | None
    expires: float
    requester: str
    text: str
    file_ids: tuple[str, ...] = ()
    key: ConversationKey | None = None
    files: tuple = field(default=(), compare=False)

    def to_json(self) -> str:
        """The stored form (the request, the plan, the files' ids, the conversation)."""
        key = self.key
        return json.dumps({"text": self.text, "tasks": [t.to_json() for t in self.tasks], "files": list(self.file_ids),
                           "estimate": self.estimate_usd,
                           "key": [key.platform, key.workspace, key.channel, key.thread] if key else None})

    @classmethod
    def from_json(cls, plan_id: str, requester: str, payload: str, expires: float) -> PendingPlan:
        """Read a stored plan back.

        Raises:
            ValueError, KeyError, TypeError: an unreadable payload.
        """
        d = json.loads(payload)
        tasks = tuple(Task(int(t["id"]), str(t["task"]), tuple(int(x) for x in t["dep"] if int(x) >= 0),
                           {str(k): str(v) for k, v in t["args"].items()}) for t in d["tasks"])
        key = ConversationKey(*map(str, d["key"])) if d.get("key") else None
        return cls(plan_id, tasks, d.get("estimate"), expires, requester, str(d["text"]),
                   tuple(map(str, d.get("files") or ())), key)

    def event(self) -> ApprovalNeeded:
        """The :class:`ApprovalNeeded` event of this plan."""
        return ApprovalNeeded(self.plan_id, self.tasks, self.estimate_usd, self.expires, self.requester)


def new_plan_id() -> str:
    """A fresh plan id: 16 hex digits, unguessable (a button's value is seen by the channel)."""
    return secrets.token_hex(8)


def may_approve(plan: PendingPlan, who: Requester | None, settings: PlanningSettings) -> bool:
    """Whether ``who`` may run or cancel ``plan``: its requester, or a user or role of
    ``[planning] approvers``; ``who`` ``None`` is a caller the front end admitted itself (the terminal)."""
    if who is None:
        return True
    return who.user == plan.requester or bool({who.user, *who.roles} & set(settings.approvers))


class PendingPlans:
    """Where plans wait: the conversation store (shared by every process, kept across restarts),
    or this process's memory for a service without one (at most :data:`MEMORY_PLANS`).

    Args:
        store: the store's :class:`bot.store.protocol.Approvals` part, or ``None``.
        settings: ``[planning]``.
        clock: epoch seconds.
    """

    def __init__(self, store: object | None, settings: PlanningSettings, clock=time.time) -> None:
        self.store, self.settings, self.clock = store, settings, clock
        self._memory: TTLCache[str, PendingPlan] = TTLCache(maxsize=MEMORY_PLANS, ttl=settings.approval_timeout + 60)

    async def keep(self, plan: PendingPlan) -> None:
        """Keep ``plan``; one-off plans (no conversation) stay in memory.

        Raises:
            StorageError: the store fails.
        """
        if plan.key is None or self.store is None:
            self._memory[plan.plan_id] = plan
            return
        await self.store.save_plan(plan.plan_id, plan.requester, plan.to_json(), plan.expires)  # type: ignore[attr-defined]

    async def find(self, plan_id: str, who: Requester | None) -> PendingPlan:
        """The kept plan ``plan_id``, if ``who`` may press its buttons and it has not expired.

        Raises:
            InputError: it was run, cancelled or never existed (:data:`GONE`), or expired (:data:`EXPIRED`).
            Refused: ``who`` is neither its requester nor an approver (:data:`NOT_YOURS`).
            StorageError: the store fails.
        """
        plan = self._memory.get(plan_id)
        if plan is None and self.store is not None:
            row = await self.store.pending_plan(plan_id)  # type: ignore[attr-defined]
            if row is not None:
                try:
                    plan = PendingPlan.from_json(plan_id, *row)
                except (ValueError, KeyError, TypeError) as e:
                    raise InputError(GONE, f"kept plan {plan_id} unreadable: {e}") from None
        if plan is None:
            raise InputError(GONE, f"no kept plan {plan_id}")
        if not may_approve(plan, who, self.settings):
            raise Refused("approval", NOT_YOURS)
        if plan.expires <= self.clock():
            await self.take(plan_id)
            raise InputError(EXPIRED, f"plan {plan_id} expired")
        return plan

    async def take(self, plan_id: str) -> bool:
        """Remove a kept plan; ``True`` for the one caller that removed it.

        Raises:
            StorageError: the store fails.
        """
        if self._memory.pop(plan_id, None) is not None:
            return True
        return self.store is not None and await self.store.take_plan(plan_id)  # type: ignore[attr-defined]
