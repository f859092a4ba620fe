"""A run's planning rounds: the first plan, then each re-plan (:mod:`pipeline.replanning`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

RoundOutcome = Literal["planned", "answer", "repeated", "invalid", "deadline", "stopped", "error"]


@dataclass
class Round:
    """One planning round of a run (the first plan is round 1; re-plans follow).

    Attributes:
        number: 1, 2, ...
        task_ids: ids of the tasks this round added to the run (earlier rounds' results are reused,
            never run again).
        reason: why the round was asked (``None`` for round 1).
        outcome: ``"planned"`` (its tasks ran), ``"answer"`` (the controller answered from what
            exists), ``"repeated"`` (it only repeated tasks already tried), ``"invalid"`` (its plan
            could not be used), ``"deadline"`` / ``"stopped"`` (cut short), ``"error"`` (the
            controller failed).
    """

    number: int
    task_ids: tuple[int, ...] = ()
    reason: str | None = None
    outcome: RoundOutcome = "planned"

    def to_json(self) -> dict[str, Any]:
        """``{"round", "tasks", "reason", "outcome"}``."""
        return {"round": self.number, "tasks": list(self.task_ids), "reason": self.reason, "outcome": self.outcome}
