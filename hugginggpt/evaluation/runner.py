"""Send TaskBench requests through the real task planning stage, concurrently, with a cache.

Each request goes through :func:`pipeline.planning.plan` exactly as a user's would: our prompts,
our validation and one repair round, against the configured controller. The controller's answers
are cached by the exact planning messages (so by request, prompt version and task list), the
model and the sampling settings, in a JSON-lines file appended as each plan arrives: an interrupted
run loses nothing, and ``--resume`` re-scores without asking the controller again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import AbstractSet, Any, Literal

from pipeline import planning
from pipeline.errors import ControllerError, PlanError
from pipeline.llm import Controller, Usage
from pipeline.types import Request, Task

from .taskbench import GoldRecord, resources_for

log = logging.getLogger(__name__)

Status = Literal["planned", "repaired", "refused", "error"]

ERRORS_IN_A_ROW = 5
"""Controller failures in a row after which the run stops (the endpoint is down, not one request)."""


@dataclass
class Outcome:
    """What task planning gave for one record.

    Attributes:
        id: the record's id.
        status: ``"planned"`` (valid at once), ``"repaired"`` (valid after the repair round),
            ``"refused"`` (invalid after it: an empty plan for the metrics), ``"error"`` (the
            controller failed: not scored, not cached).
        tasks: the validated plan in the paper's record shape (``[]`` when none).
        problem: why the plan was refused, or the controller's error sentence.
        latency_s: seconds task planning took (repair round included).
        prompt_tokens, completion_tokens: tokens the controller reported (0 when it reports none).
        cached: the outcome came from the cache, not from the controller.
    """

    id: str
    status: Status
    tasks: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False

    def plan(self) -> list[Task]:
        """The plan as :class:`Task` objects."""
        return [
            Task(id=int(t["id"]), task=t["task"], dep=tuple(d for d in t.get("dep", []) if d != -1), args=dict(t["args"]))
            for t in self.tasks
        ]


class PlanCache:
    """Planning outcomes on disk, keyed by what was sent (JSON lines, last entry of a key wins).

    Args:
        path: the file (created with its folder on first write); ``None``: no cache.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, dict[str, Any]] = {}
        if path is not None and path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                    self._entries[entry["key"]] = entry["outcome"]
                except (ValueError, KeyError, TypeError):  # a line cut by a crash: asked again
                    continue

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Outcome | None:
        """The cached outcome for ``key``, marked ``cached``."""
        raw = self._entries.get(key)
        if raw is None:
            return None
        return Outcome(**{**raw, "cached": True})

    def put(self, key: str, outcome: Outcome) -> None:
        """Remember ``outcome`` (appended and flushed at once; errors are never cached)."""
        if self.path is None or outcome.status == "error":
            return
        raw = asdict(outcome)
        raw.pop("cached")
        self._entries[key] = raw
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, "outcome": raw}, ensure_ascii=False) + "\n")


def cache_key(controller: Controller, request: Request, available: AbstractSet[str]) -> str:
    """SHA-256 of the planning messages, the model name and the sampling settings."""
    sent = {
        "messages": planning.planning_messages(request, available),
        "model": controller.model,
        "temperature": controller.temperature,
        "structured_output": controller.structured_output,
    }
    return hashlib.sha256(json.dumps(sent, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def prompt_version(available: AbstractSet[str]) -> str:
    """A short fingerprint of the planning prompt (templates, demonstrations, task list)."""
    probe = Request(text="")
    text = json.dumps(planning.planning_messages(probe, available), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


async def plan_one(controller: Controller, record: GoldRecord, available: AbstractSet[str]) -> Outcome:
    """Run task planning on one record (no cache)."""
    request = Request(text=record.request, files=resources_for(record.request))
    usage = Usage()
    t0 = time.monotonic()
    try:
        tasks = await planning.plan(controller, request, available, usage)
        outcome = Outcome(record.id, "repaired" if usage.plan_repairs else "planned", [t.to_json() for t in tasks])
    except PlanError as e:
        outcome = Outcome(record.id, "refused", problem=str(e))
    except ControllerError as e:
        outcome = Outcome(record.id, "error", problem=e.user_message)
    outcome.latency_s = round(time.monotonic() - t0, 3)
    outcome.prompt_tokens, outcome.completion_tokens = usage.prompt_tokens, usage.completion_tokens
    return outcome


async def plan_all(
    controller: Controller,
    records: Sequence[GoldRecord],
    available: AbstractSet[str],
    *,
    cache: PlanCache,
    reuse: bool,
    concurrency: int,
    progress: Callable[[Outcome], None] = lambda o: None,
) -> list[Outcome]:
    """Plan every record, at most ``concurrency`` at a time.

    Args:
        reuse: take outcomes from ``cache`` when it has them (``--resume``); either way new ones
            are written to it.
        progress: called with each outcome as it is known (cached ones included).

    Returns:
        Outcomes in the order of ``records``.

    Raises:
        ControllerError: :data:`ERRORS_IN_A_ROW` controller calls failed in a row (what finished
            is in the cache).
    """
    gate = asyncio.Semaphore(max(1, concurrency))
    in_a_row = 0
    results: dict[int, Outcome] = {}

    async def one(i: int, record: GoldRecord) -> None:
        nonlocal in_a_row
        key = cache_key(controller, Request(text=record.request, files=resources_for(record.request)), available)
        outcome = cache.get(key) if reuse else None
        if outcome is None:
            async with gate:
                outcome = await plan_one(controller, record, available)
            if outcome.status == "error":
                in_a_row += 1
                log.warning("eval: request %s: controller failed: %s", record.id, outcome.problem)
                if in_a_row >= ERRORS_IN_A_ROW:
                    raise ControllerError(
                        f"{outcome.problem} The evaluation stopped after {ERRORS_IN_A_ROW} failures in a row; "
                        "what finished is cached (run again with --resume).",
                        f"{ERRORS_IN_A_ROW} controller failures in a row",
                    )
            else:
                in_a_row = 0
                cache.put(key, outcome)
        outcome.id = record.id
        results[i] = outcome
        progress(outcome)

    try:
        async with asyncio.TaskGroup() as group:
            for i, record in enumerate(records):
                group.create_task(one(i, record))
    except BaseExceptionGroup as group_error:
        first = group_error.exceptions[0]
        raise first from None
    return [results[i] for i in range(len(records))]
