"""Task planning as a stream, with eager dispatch (HuggingGPT §3.1; the dispatch follows
LLMCompiler, Kim et al. 2023, "An LLM Compiler for Parallel Function Calling", §3.2).

The plan is asked for as a stream and parsed as it arrives (``jiter``'s partial mode). A task
record is handed out as soon as it is complete (its closing brace has arrived) and the plan up to it
is valid on its own (:func:`pipeline.planning.read_plan` on that prefix, normalised: known task, argument
kinds, dependencies and placeholders pointing at tasks already seen, resources that exist). A
record that is not valid with those before it (for example one depending on a later task) holds
early dispatch back until the records it needs have arrived.

When the stream ends, the whole plan is validated as :func:`pipeline.planning.plan` does. If it
is invalid, the tasks handed out early are withdrawn (:class:`~pipeline.types.PlanDiscarded`) and the repair
round runs (streamed and dispatched the same way); if it is invalid again, :class:`PlanError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence, Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Union

import jiter

from .errors import PlanError
from .llm import Controller, Usage
from .planning import PlanInvalid, parse_plan, plan_schema, planning_messages, read_plan
from .types import PlanDiscarded, PlanReady, Request, Task, TaskPlanned

log = logging.getLogger(__name__)


PlanItem = Union[TaskPlanned, PlanDiscarded, PlanReady]
"""What :func:`plan_stream` yields (the pipeline's own events, passed on to front ends)."""


def complete_records(text: str) -> list[Any]:
    """The task records of a partly written plan that are certainly complete.

    Args:
        text: the controller's answer so far: ``{"tasks": [...`` or a bare list, possibly after a
            Markdown fence or a few words.

    Returns:
        The records whose closing brace has arrived (a record still being written is left out);
        ``[]`` when no list of records can be read yet.
    """
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return []
    try:
        doc = jiter.from_json(text[min(starts):].encode(), partial_mode="trailing-strings")
    except ValueError:
        return []
    records = doc.get("tasks") if isinstance(doc, dict) else doc
    if not isinstance(records, list):
        return []
    # The last record is complete too when closing the list (and the object) makes valid JSON:
    # its closing brace has arrived, though the list's own "]" has not.
    body = text[min(starts):].rstrip().rstrip("`").rstrip().rstrip(",")
    closings = ("", "}", "]}") if isinstance(doc, dict) else ("", "]")  # "}": the list's "]" came, the object's "}" not
    for candidate in (body + closing for closing in closings):
        try:
            whole = jiter.from_json(candidate.encode())
        except ValueError:
            continue
        if (whole.get("tasks") if isinstance(whole, dict) else whole) == records:
            return records
    return records[:-1]


async def plan_stream(
    controller: Controller, request: Request, available: AbstractSet[str], usage: Usage
) -> AsyncIterator[PlanItem]:
    """Run task planning with one repair round, handing out tasks while the plan streams.

    Yields:
        :class:`~pipeline.types.TaskPlanned` for each task that may start early,
        :class:`~pipeline.types.PlanDiscarded` when the finished plan proves invalid after some
        were handed out, and last :class:`~pipeline.types.PlanReady`.

    Raises:
        PlanError: the plan was still invalid after the repair round.
        ControllerError: the controller failed.
    """
    schema = plan_schema(available)
    messages = planning_messages(request, available)
    attempt = _Attempt()
    for number in (1, 2):
        if number == 2:
            usage.plan_repairs += 1
            messages = planning_messages(request, available, problem=attempt.problem)
            messages.insert(-1, {"role": "assistant", "content": attempt.raw[:4000]})
        attempt = _Attempt()
        stream = controller.stream_json(messages, stage="task-planning", schema_name="task_plan", schema=schema, usage=usage)
        async with contextlib.aclosing(_early_tasks(stream, request, available, attempt)) as early:
            async for planned in early:
                yield planned
        try:
            tasks, notes = read_plan(parse_plan(attempt.raw), available=available, resources=request.resources,
                                     request_text=request.text)
        except PlanInvalid as e:
            attempt.problem = e.problem
            log.warning("plan rejected%s (%s); raw=%r", " after repair" if number == 2 else "", e.problem, attempt.raw[:500])
            if attempt.started:
                yield PlanDiscarded(e.problem, tuple(sorted(attempt.started)))
            if number == 2:
                raise PlanError(
                    "I could not turn your request into a valid plan of tasks, even after asking the controller "
                    f"to fix it: {e.problem}",
                    f"plan invalid after repair: {e.problem}",
                ) from None
            continue
        changed = _changed(attempt.started, tasks)
        if changed:  # cannot happen for a prefix-valid plan, but never run a task the plan lost
            log.warning("plan: tasks %s changed after they started; restarting them", changed)
            yield PlanDiscarded("the finished plan changed tasks that had started", tuple(sorted(attempt.started)))
        yield PlanReady(tuple(tasks), tuple(n.text for n in notes))
        return


@dataclass
class _Attempt:
    """One planning answer as it streams: its text so far, the tasks handed out early, and the
    problem the finished plan had (quoted in the repair round)."""

    raw: str = ""
    started: dict[int, Task] = field(default_factory=dict)
    problem: str = ""


async def _early_tasks(stream: AsyncIterator[str], request: Request, available: AbstractSet[str],
                       attempt: _Attempt) -> AsyncIterator[TaskPlanned]:
    """Read the controller's answer into ``attempt.raw``; each task of the complete records so far
    that form a valid plan prefix is handed out once (``attempt.started``)."""
    seen = deltas = 0
    async for delta in stream:
        attempt.raw += delta
        deltas += 1
        if deltas < 2:  # a whole answer in one piece (no streaming) is not "early"
            continue
        records = complete_records(attempt.raw)
        if len(records) <= seen:
            continue
        seen = len(records)
        try:
            prefix = read_plan(records, available=available, resources=request.resources, request_text=request.text).tasks
        except PlanInvalid as e:  # e.g. a task depending on a later one: wait for more
            log.debug("plan: no early start for the tasks so far (%s)", e.problem)
            continue
        for task in prefix:
            if task.id not in attempt.started:
                attempt.started[task.id] = task
                yield TaskPlanned(task)


def _changed(started: dict[int, Task], tasks: Sequence[Task]) -> list[int]:
    final = {t.id: t for t in tasks}
    return [tid for tid, t in started.items() if final.get(tid) != t]
