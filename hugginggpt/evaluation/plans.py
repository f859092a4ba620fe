"""Recorded plans through normalisation and validation, without running anything (``hugginggpt
eval plans``).

Each line of the file is one plan as TaskBench's prediction files hold them: ``{"id",
"user_request", "result": {"task_nodes": [{"task", "arguments"}], "task_links": [{"source",
"target"}]}}``. A node's id is its position; a link whose tool names are unique in the plan is a
dependency. The files the request names (``example.jpg``) count as attached, unless the line says
which are (``"files": ["example.png"]``). A line may also hold the controller's answer to the
repair round (``"repair": {"task_nodes", "task_links"}``, or a ``{"tasks": [...]}`` plan as text).

Each plan ends in one of four ways: accepted as it is, accepted after normalisation (counted by
rule, :mod:`pipeline.plan_normalise`), sent to the repair round and then accepted (repaired), or
refused (counted by :attr:`pipeline.planning.PlanInvalid.reason` of the last problem; with no
recorded repair answer a plan sent to repair counts as refused).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from pipeline.planning import PlanInvalid, parse_plan, read_plan
from pipeline.types import Resource

from bot.errors import InputError
from .taskbench import json_lines, resources_for

__all__ = ["PlanCase", "Verdict", "evaluate", "load_plans", "summary", "text_report"]


@dataclass(frozen=True)
class PlanCase:
    """One recorded plan: ``records`` as task records, ``repair`` the recorded repair answer (or ``None``)."""

    id: str
    request: str
    resources: tuple[Resource, ...]
    records: Any
    repair: Any = None


@dataclass(frozen=True)
class Verdict:
    """How one plan ended: ``outcome`` ``"as_is" | "normalised" | "repaired" | "refused"``;
    ``rules`` the normalisation rules that changed it; ``first`` the reason it was sent to repair
    (``None`` if it was not); ``reason`` why it was refused (``None`` if accepted); ``problem`` the
    sentence of the last problem; ``notes`` what normalisation read, one sentence each."""

    id: str
    outcome: str
    rules: tuple[str, ...] = ()
    first: str | None = None
    reason: str | None = None
    problem: str | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"id", "outcome", "rules", "to_repair", "reason", "problem", "notes"}``."""
        return {"id": self.id, "outcome": self.outcome, "rules": list(self.rules), "to_repair": self.first,
                "reason": self.reason, "problem": self.problem, "notes": list(self.notes)}


def _records(result: Any) -> Any:
    """A TaskBench ``result`` (nodes and links), or a plan as text or as a list, as task records."""
    if isinstance(result, str):
        return result
    if not isinstance(result, dict) or "task_nodes" not in result:
        return result.get("tasks", result) if isinstance(result, dict) else result
    nodes = result.get("task_nodes") or []
    names = [str(n.get("task", "")) if isinstance(n, dict) else str(n) for n in nodes]
    deps: dict[int, list[int]] = {}
    for link in result.get("task_links") or []:
        if not isinstance(link, dict):
            continue
        src, dst = str(link.get("source", "")), str(link.get("target", ""))
        if names.count(src) == 1 and names.count(dst) == 1 and src != dst:
            deps.setdefault(names.index(dst), []).append(names.index(src))
    return [
        {"task": names[i], "id": i, "dep": deps.get(i, [-1]),
         "args": n.get("arguments", n.get("args", [])) if isinstance(n, dict) else []}
        for i, n in enumerate(nodes)
    ]


def _case(number: int, raw: Any) -> PlanCase:
    if not isinstance(raw, dict) or not isinstance(raw.get("user_request"), str) or "result" not in raw:
        raise InputError(f"Line {number} is not a recorded plan (it needs user_request and result).")
    request = raw["user_request"]
    files = raw.get("files")
    named = " ".join(str(f) for f in files) if isinstance(files, list) else request
    resources = tuple(resources_for(named))
    repair = _records(raw["repair"]) if raw.get("repair") is not None else None
    return PlanCase(str(raw.get("id", number)), request, resources, _records(raw["result"]), repair)


def load_plans(text: str) -> list[PlanCase]:
    """Read the recorded plans of a file's text (one JSON object a line, blank lines skipped).

    Raises:
        InputError: a line is not JSON or not a recorded plan (names the line), or there is none.
    """
    cases = []
    for number, raw in json_lines(text, lambda n: f"Line {n} is not JSON; the file needs one recorded plan a line."):
        cases.append(_case(number, raw))
    if not cases:
        raise InputError("The file holds no recorded plans.")
    return cases


def _read(records: Any, case: PlanCase, available: AbstractSet[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The rules that changed the plan and its notes; raises :class:`PlanInvalid` as the planner would."""
    records = parse_plan(records) if isinstance(records, str) else records
    if not isinstance(records, list):
        raise PlanInvalid('"tasks" must be a JSON list of task objects.', "not-a-plan")
    got = read_plan(records, available=available, resources=case.resources, request_text=case.request)
    return tuple(dict.fromkeys(n.rule for n in got.notes)), tuple(n.text for n in got.notes)


def evaluate(case: PlanCase, available: AbstractSet[str]) -> Verdict:
    """Normalise and validate ``case``'s plan (then its repair answer if it is sent to repair).

    Args:
        case: the recorded plan.
        available: task names counted as served (all of the registry's for a recorded plan).

    Returns:
        The :class:`Verdict`; nothing is run and no controller is asked.
    """
    try:
        rules, notes = _read(case.records, case, available)
        return Verdict(case.id, "normalised" if rules else "as_is", rules, notes=notes)
    except PlanInvalid as e:
        first = e
    if case.repair is None:
        return Verdict(case.id, "refused", first=first.reason, reason=first.reason, problem=first.problem)
    try:
        rules, notes = _read(case.repair, case, available)
    except PlanInvalid as e:
        return Verdict(case.id, "refused", first=first.reason, reason=e.reason, problem=e.problem)
    return Verdict(case.id, "repaired", rules, first=first.reason, problem=first.problem, notes=notes)


def summary(verdicts: list[Verdict]) -> dict[str, Any]:
    """``{"total", "accepted_as_is", "normalised", "to_repair", "repaired", "refused", "rules",
    "to_repair_reasons", "refused_reasons", "plans"}``: counts; ``rules`` counts the plans each
    rule changed among those accepted after normalisation; ``plans`` each :meth:`Verdict.to_json`."""
    count = Counter(v.outcome for v in verdicts)
    return {
        "total": len(verdicts),
        "accepted_as_is": count["as_is"],
        "normalised": count["normalised"],
        "to_repair": sum(v.first is not None for v in verdicts),
        "repaired": count["repaired"],
        "refused": count["refused"],
        "rules": dict(Counter(r for v in verdicts if v.outcome == "normalised" for r in v.rules).most_common()),
        "to_repair_reasons": dict(Counter(v.first for v in verdicts if v.first).most_common()),
        "refused_reasons": dict(Counter(v.reason for v in verdicts if v.outcome == "refused").most_common()),
        "plans": [v.to_json() for v in verdicts],
    }


def text_report(s: dict[str, Any]) -> str:
    """The summary as lines for a terminal."""

    def by(counts: dict[str, int]) -> str:
        return f"  ({', '.join(f'{k} {n}' for k, n in counts.items())})" if counts else ""

    return "\n".join([
        f"plans:                        {s['total']}",
        f"accepted as is:               {s['accepted_as_is']}",
        f"accepted after normalisation: {s['normalised']}{by(s['rules'])}",
        f"sent to repair:               {s['to_repair']}{by(s['to_repair_reasons'])}",
        f"  repaired:                   {s['repaired']}",
        f"refused:                      {s['refused']}{by(s['refused_reasons'])}",
    ])
