"""What front ends see of stored conversations, through the service (they never hold the store):
the files of every conversation of one owner (the HTTP API's ``GET /v1/files``) and one
conversation to resume (``hugginggpt chat --conversation``).

:class:`StoredFile` is what :meth:`bot.store.protocol.Conversations.files_of` returns; the store
answers it with keyset pagination over ``(created, conversation_id, n)`` (:mod:`bot.store.sql.listing`):
a page never skips or repeats a file when files are added meanwhile, and costs the same on the
thousandth page as on the first.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pipeline.types import Resource

from .incoming import ConversationKey

Order = Literal["asc", "desc"]
Origin = Literal["user", "task"]


@dataclass(frozen=True)
class StoredFile:
    """A resource with where and when it was stored.

    Attributes:
        conversation_id: the conversation that holds it.
        resource: the file (id, kind, absolute path, sniffed MIME type, size in bytes, origin...).
        created: when it was stored, in seconds since the epoch.
    """

    conversation_id: str
    resource: Resource
    created: float


@dataclass(frozen=True)
class StoredConversation:
    """A stored conversation as a front end resumes it.

    Attributes:
        key: where it is held (platform, workspace, channel, thread).
        turns: every turn, oldest first, as JSON-able dicts
            (:meth:`bot.store.protocol.Conversations.turns`).
        files: every resource (the users' files and generated ones), oldest first.
    """

    key: ConversationKey
    turns: list[dict[str, Any]]
    files: list[Resource]


Scope = Literal["user", "channel", "team"]
"""Who a budget is for: a user, a channel (Slack channel, Discord channel) or a team (Slack
workspace, Discord guild)."""


SCOPES: tuple[Scope, ...] = ("user", "channel", "team")
"""Every scope, in the order budgets are checked."""
PERIODS = ("day", "month")
"""A budget's periods: the UTC day and the UTC month (:func:`period_bounds`)."""


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """``(start, end)`` epoch seconds of the UTC day or month holding ``now``."""
    t = datetime.fromtimestamp(now, timezone.utc)
    if period == "day":
        start = datetime(t.year, t.month, t.day, tzinfo=timezone.utc)
        return start.timestamp(), start.timestamp() + 86400.0
    start = datetime(t.year, t.month, 1, tzinfo=timezone.utc)
    days = calendar.monthrange(t.year, t.month)[1]
    return start.timestamp(), start.timestamp() + days * 86400.0


@dataclass(frozen=True)
class Payer:
    """Who a run is charged to (``None``: not known, e.g. a Discord DM has no team).

    Attributes:
        platform: the front end (``"slack"``, ``"discord"``, ``"terminal"``, ``"http"``, ``"mcp"``).
        user, channel, team: ids as ``"platform:id"``, so two platforms never share a budget.
    """

    platform: str
    user: str | None = None
    channel: str | None = None
    team: str | None = None

    def of(self, scope: Scope) -> str | None:
        """The id charged for ``scope``."""
        return {"user": self.user, "channel": self.channel, "team": self.team}[scope]


@dataclass(frozen=True)
class Limit:
    """One budget that applies to a run.

    Attributes:
        scope: ``"user" | "channel" | "team"``; key: the payer's id for it.
        period: ``"day" | "month"`` (UTC).
        usd: the budget in US dollars.
        since: epoch seconds the current period began; until: when it ends (the reset).
    """

    scope: Scope
    key: str
    period: Literal["day", "month"]
    usd: float
    since: float
    until: float


@dataclass(frozen=True)
class Overspent:
    """A reservation refused: the budget it would pass and what was spent in its period (US dollars)."""

    limit: Limit
    spent: float


@dataclass(frozen=True)
class Settled:
    """A run's cost to record (US dollars): its estimate (``None``: unknown), its actual cost
    (``None``: a price unknown) and ``charged``, its known part, which then counts against budgets
    instead of the run's reservation.

    Attributes:
        spend_id: the run's row (made here when the run reserved nothing); payer: who pays;
        at: epoch seconds the run began; conversation_id, turn: the stored turn, if any.
    """

    spend_id: str
    payer: Payer
    at: float
    estimate: float | None
    actual: float | None
    charged: float
    conversation_id: str | None = None
    turn: int | None = None


@dataclass(frozen=True)
class SpendRow:
    """One line of the usage report (``hugginggpt usage``).

    Attributes:
        key: the user's, channel's or team's id (``"platform:id"``; ``""`` when not known).
        runs: runs charged.
        estimate_usd: sum of their estimates where known.
        charged_usd: sum of what they cost where prices were known (reservations of runs still
            going, or whose process died, count as reserved).
        unknown: runs whose actual cost had an unknown price.
    """

    key: str
    runs: int
    estimate_usd: float
    charged_usd: float
    unknown: int
