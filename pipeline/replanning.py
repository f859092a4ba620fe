"""Re-planning from the results: the step between task execution and response generation.

HuggingGPT plans once and answers from whatever came out (Shen et al., NeurIPS 2023, §3; its
limitations section notes that a plan may be wrong). Like LLMCompiler's joiner (Kim et al. 2023,
§3.3), this step shows the controller the plan, the results and the failures, and the controller
either answers from what exists (``{"tasks": []}``) or returns further tasks that reuse the finished
results (``<resource>-N`` of a finished task, or a generated file's resource id): what succeeded is
never run again.

When it is asked is decided here, from the results alone (no LLM call): a task of the last round
failed or was skipped, or succeeded blank (an empty transcript: no text, no file). A run
whose tasks all produced something costs no extra call. The pipeline bounds the rounds
(``ExecutionLimits.max_replans``) and the run's deadline covers them.

A further plan is untrusted like the first: it is validated together with the finished tasks
(:func:`pipeline.planning.read_plan`: normalised, then validated), its ids must be new, it may not use the output of a
task that failed, and a task that repeats one already tried (same task, same arguments) is dropped
(a repeat of a finished one is replaced by it), so rounds cannot cycle.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence, Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import json_repair

from . import prompts, tracing
from .cost import Cost
from .errors import ControllerError, HuggingGPTError
from .llm import Controller
from .planning import PlanInvalid, chat_log_text, parse_plan, plan_schema, read_plan, task_lines
from .response import results_view
from .run import RunState, events_until
from .tasks import drawing
from .types import (
    PLACEHOLDER, placeholder_id,
    Event, Notice, PlanReady, ReplanStarted, Request, Resource, Round, RoundOutcome, Selection, Task, TaskResult,
)

log = logging.getLogger(__name__)

REPLAN_STAGE = "task-replanning"
"""The ``X-HuggingGPT-Stage`` of the re-planning call."""

CHECKED_IMAGES = 4
"""Generated images a vision controller is shown in its checking round, at most (the first ones)."""

CHECK_SIDE = 768
"""Pixels: the longer side of an image shown to the controller (scaled down, sent as JPEG)."""

CHECK_REASON = "Checking the generated images against the request."
"""Why a run whose tasks all produced something still asks the controller (``[planning] check_images``)."""

FOUND_CHARS = 600
"""Characters of the controller's finding kept for the user."""


def generated_images(st: RunState) -> list[Resource]:
    """The images the run's finished tasks generated (not the user's files), in task order, at
    most :data:`CHECKED_IMAGES`."""
    out: list[Resource] = []
    for t in st.tasks:
        r = st.record.results.get(t.id)
        if r is not None and r.status == "ok" and r.output is not None:
            out += [f for f in r.output.files if f.kind == "image"]
    return out[:CHECKED_IMAGES]


def _jpeg_uri(path: Any, max_pixels: int) -> str:
    """``data:image/jpeg;base64,...`` of the image at ``path``, its longer side at most
    :data:`CHECK_SIDE` (the pixel count checked before decoding)."""
    im = drawing.open_rgb(Path(path).read_bytes(), max_pixels)
    im.thumbnail((CHECK_SIDE, CHECK_SIDE))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


async def image_parts(images: Sequence[Resource], max_pixels: int) -> list[dict[str, Any]]:
    """Chat content parts showing ``images`` to the controller: each id as text, then the image
    (a scaled ``data:`` URI of our own stored file, never a URL). An image that cannot be read is
    left out and logged."""
    parts: list[dict[str, Any]] = []
    for r in images:
        try:
            uri = await asyncio.to_thread(_jpeg_uri, r.path, max_pixels)
        except Exception as exc:  # noqa: BLE001 - a stored file that no longer reads: not shown, said in the log
            log.warning("generated image %s not shown to the controller: %r", r.id, exc)
            continue
        parts += [{"type": "text", "text": f"{r.id}:"}, {"type": "image_url", "image_url": {"url": uri}}]
    return parts


def finding(raw: str) -> str:
    """The controller's ``"found"`` sentence of a checking round (``""`` when it gave none), cut to
    :data:`FOUND_CHARS`."""
    try:
        data = json_repair.loads(raw or "")
    except Exception:  # noqa: BLE001 - no finding in an unreadable answer; the plan's parse says why
        return ""
    found = data.get("found") if isinstance(data, dict) else None
    return " ".join(found.split())[:FOUND_CHARS] if isinstance(found, str) else ""


def _is_empty(result: TaskResult) -> bool:
    """Whether an ``ok`` result came back blank: no file and no text (an empty transcript, a
    caption of nothing). A result that says it found nothing ("no entities found") is an answer,
    not a blank: it does not make the controller re-plan."""
    out = result.output
    return out is None or (not (out.text or "").strip() and not out.files)


def replan_reason(tasks: Sequence[Task], results: Mapping[int, TaskResult]) -> str | None:
    """Why the controller should see these results before answering, or ``None`` (no call).

    Args:
        tasks: the tasks of the round just executed.
        results: task id to result (a task without one never finished).

    Returns:
        One sentence for users naming the tasks that failed, were skipped or came back empty; or
        ``None`` when every task produced something.
    """
    parts = []
    for t in tasks:
        r = results.get(t.id)
        if r is None or r.status == "failed":
            parts.append(f"task {t.id} ({t.task}) failed")
        elif r.status == "skipped":
            parts.append(f"task {t.id} ({t.task}) was skipped")
        elif _is_empty(r):
            parts.append(f"task {t.id} ({t.task}) came back blank")
    if not parts:
        return None
    return "; ".join(parts).capitalize() + "."


def replan_messages(
    request: Request, available: AbstractSet[str], tasks: Sequence[Task], selections: Mapping[int, Selection],
    results: Mapping[int, TaskResult], resources: Sequence[Resource], *, images: bool = False,
) -> list[dict[str, str]]:
    """Messages for the re-planning call: our instructions with the served tasks, then the chat
    log, the request, the files (generated ones included), the plan so far, the models, the results
    and the first free task id. ``images``: the generated images follow as image parts, to be
    checked against the request (the instructions ask for a ``"found"`` sentence)."""
    system = prompts.render("replanning.system", tasks=task_lines(available), images=images)
    user = prompts.render(
        "replanning.user",
        history=chat_log_text(request.history),
        request=request.text,
        resources=json.dumps([r.prompt_view() for r in resources], ensure_ascii=False),
        plan=json.dumps([t.to_json() for t in tasks], ensure_ascii=False),
        selections=json.dumps({str(k): s.model for k, s in sorted(selections.items())}, ensure_ascii=False),
        results=json.dumps(results_view(list(tasks), dict(results)), ensure_ascii=False),
        available=json.dumps(sorted(available)),
        next_id=next_task_id(tasks),
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def next_task_id(tasks: Sequence[Task]) -> int:
    """The first id a further task may take (one past the largest so far)."""
    return max((t.id for t in tasks), default=-1) + 1


@dataclass(frozen=True)
class Decision:
    """What a re-planning answer comes to.

    Attributes:
        tasks: further tasks to run (new ids; may depend on finished tasks).
        outcome: ``"planned"`` (``tasks`` is not empty), ``"answer"`` or ``"repeated"``.
        note: a sentence for users when tasks were dropped as repeats, else ``""``.
        found: what a vision controller found when it checked the generated images against the
            request, else ``""``.
    """

    tasks: tuple[Task, ...]
    outcome: RoundOutcome
    note: str = ""
    found: str = ""


def accept_replan(
    raw: str, *, request: Request, available: AbstractSet[str], tasks: Sequence[Task],
    results: Mapping[int, TaskResult], resources: Sequence[Resource],
) -> Decision:
    """Turn the controller's re-planning answer into further tasks.

    Args:
        raw: the controller's answer (JSON, repaired by :func:`pipeline.planning.parse_plan`).
        request: the request.
        available: tasks served now.
        tasks: every task of the run so far; results: their results.
        resources: the files a task may name (the request's and the generated ones).

    Returns:
        The :class:`Decision`.

    Raises:
        PlanInvalid: the answer is no plan, reuses an id, uses the output of a task that did not
            succeed, or fails validation together with the finished tasks.
    """
    records = parse_plan(raw)
    if not records:
        return Decision((), "answer")
    finished = [t for t in tasks if (r := results.get(t.id)) is not None and r.status == "ok"]
    new_ids = _check_new_records(records, tasks, {t.id for t in finished})
    combined = read_plan([t.to_json() for t in finished] + list(records), available=available,
                         resources=resources, request_text=request.text).tasks
    fresh = [t for t in combined if t.id in new_ids]
    kept, dropped = _drop_repeats(fresh, tasks, results)
    if not kept:
        return Decision((), "repeated", "The controller's new plan only repeated tasks already tried, "
                                        "so the answer uses what finished.")
    note = ""
    if dropped:
        note = (f"{dropped} task{'s' if dropped != 1 else ''} of the new plan repeated what was already tried "
                "and did not run again.")
    return Decision(tuple(kept), "planned", note)


def _check_new_records(records: Sequence[Any], tasks: Sequence[Task], finished: set[int]) -> set[int]:
    """New ids only, and no use of a task that did not succeed (before the plan-wide validation,
    whose sentences would not say why). Returns the new ids."""
    ids: set[int] = set()
    earlier = {t.id for t in tasks}
    first_free = next_task_id(tasks)
    for pos, item in enumerate(records):
        if not isinstance(item, dict) or "id" not in item:
            raise PlanInvalid(f"Item {pos} of the new plan is not a task object with an \"id\".")
        tid = item["id"]
        if isinstance(tid, (int, str)) and str(tid).strip().lstrip("-").isdigit():
            tid = int(str(tid).strip())
        else:
            raise PlanInvalid(f'The "id" of item {pos} must be an integer.')
        if tid in earlier:
            raise PlanInvalid(f"Task id {tid} is already used; number new tasks from {first_free} on.")
        ids.add(tid)
        deps = item.get("dep") or []
        deps = deps if isinstance(deps, list) else [deps]
        refs = [placeholder_id(m) for v in (item.get("args") or {}).values() if isinstance(v, str)
                for m in PLACEHOLDER.finditer(v)]
        for d in [*deps, *refs]:
            if isinstance(d, int) and d in earlier and d not in finished:
                raise PlanInvalid(f"Task {tid} uses the output of task {d}, which did not succeed.")
    return ids


def _drop_repeats(
    fresh: Sequence[Task], tasks: Sequence[Task], results: Mapping[int, TaskResult]
) -> tuple[list[Task], int]:
    """Drop the new tasks that repeat one already tried (same task and arguments, references
    followed): a repeat of a finished task is replaced by it, a repeat of a failed one is dropped
    with everything that needs it. Returns the tasks kept and how many were dropped."""
    tried = {(t.task, _key(t.args)): t.id for t in tasks}
    alias: dict[int, int] = {}
    dead: set[int] = set()
    kept: list[Task] = []
    for t in sorted(fresh, key=lambda t: t.id):  # validated: a task's producers have been seen when it's reached
        if any(d in dead for d in t.dep):
            dead.add(t.id)
            continue
        t = _rename(t, alias)
        old = tried.get((t.task, _key(t.args)))
        if old is None:
            kept.append(t)
            continue
        log.info("replan: task %d repeats task %d", t.id, old)
        if results.get(old) is not None and results[old].status == "ok":
            alias[t.id] = old
        else:
            dead.add(t.id)
    return kept, len(fresh) - len(kept)


def _rename(task: Task, alias: Mapping[int, int]) -> Task:
    """``task`` with references to aliased tasks pointing at the finished ones they repeat."""
    if not alias:
        return task

    def sub(m: Any) -> str:
        n = placeholder_id(m)
        return f"<resource>-{alias.get(n, n)}"

    args = {k: PLACEHOLDER.sub(sub, v) for k, v in task.args.items()}
    dep = tuple(sorted({alias.get(d, d) for d in task.dep}))
    return Task(task.id, task.task, dep, args)


def _key(args: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, " ".join(v.split()).lower()) for k, v in args.items()))


def unsettled(tasks: Sequence[Task], results: Mapping[int, TaskResult], last_round: AbstractSet[int] | None) -> list[int]:
    """Ids of the tasks whose failure the run did not get past: every task not ``ok`` when no
    further round ran; else those of the last round that ran (earlier failures were planned
    around by it)."""
    scope = [t for t in tasks if last_round is None or t.id in last_round]
    return [t.id for t in scope if results.get(t.id) is None or results[t.id].status != "ok"]


def last_round_ids(rounds: Sequence[Round]) -> set[int] | None:
    """The task ids of the last re-planning round whose tasks ran (``None``: only the first plan ran)."""
    ran = [r for r in rounds if r.number > 1 and r.outcome == "planned"]
    return set(ran[-1].task_ids) if ran else None


# ---------------------------------------------------------------------------------------------
# The step itself, run by pipeline.core.Pipeline between task execution and response generation


async def replan_rounds(controller: Controller, st: RunState, max_replans: int, *,
                        check_pixels: int | None = None) -> AsyncIterator[Event]:
    """Re-plan from the results while the last round left a task failed, skipped or empty, at
    most ``max_replans`` times and within the run's deadline; each further plan's tasks join the
    run's execution (``st.run``), reusing what finished. With ``check_pixels`` (``[planning]
    check_images``: the controller sees images; the pixel limit of an image decoded to show it),
    the first round also shows the generated images and asks the controller to check them against
    the request, even when every task produced something; what it found is said to the user.

    Yields:
        Per round :class:`~pipeline.types.ReplanStarted`, a :class:`~pipeline.types.Notice` with
        what a checking round found, one when the round ends without new tasks or drops repeats,
        then ``PlanReady`` with the new tasks and their execution events. Appends to
        ``st.record.rounds`` (round 1 is already there).
    """
    record, last, checked = st.record, list(st.tasks), check_pixels is None
    while st.run is not None and len(record.rounds) <= max_replans and not st.stopped and st.left() > 0:
        reason = replan_reason(last, record.results)
        images = [] if checked else generated_images(st)
        if reason is None and not images:
            return
        current = Round(len(record.rounds) + 1, reason=reason or CHECK_REASON)
        record.rounds.append(current)
        yield ReplanStarted(current.number, current.reason)
        st.stage = "task replanning"
        t0 = time.monotonic()
        with tracing.span("task replanning", {"round": current.number}):
            decision = await _ask(controller, st, images, check_pixels or 0)
        checked = True
        record.timings_ms["replanning"] = record.timings_ms.get("replanning", 0.0) + (time.monotonic() - t0) * 1000
        current.outcome, current.task_ids = decision.outcome, tuple(t.id for t in decision.tasks)
        for sentence in (f"Checked the generated images against your request: {decision.found}" if decision.found
                         else "", decision.note):
            if sentence:
                record.notes.append(sentence)
                yield Notice(sentence)
        if not decision.tasks:
            return
        estimate = st.pricing.estimate(decision.tasks, answer=False) if st.pricing is not None else None
        if st.gate is not None:
            refusal = await _refused(st, decision.tasks, estimate)
            if refusal is not None:
                yield refusal
                return
        st.tasks.extend(decision.tasks)
        record.tasks = st.tasks
        if st.pricing is not None:
            record.estimate = st.pricing.estimate(st.tasks, st.usage)
        yield PlanReady(decision.tasks, estimate=estimate)
        st.stage = "task execution"
        async with contextlib.aclosing(_execute(st, decision.tasks)) as events:
            async for event in events:
                yield event
        last = list(decision.tasks)


async def _refused(st: RunState, tasks: Sequence[Task], estimate: Cost | None) -> Notice | None:
    """Ask the run's gate about a round's further tasks: ``None`` to run them, else the notice
    (its sentence, also in the record's notes) saying why they do not run; the answer then uses
    what finished."""
    assert st.gate is not None
    try:
        await st.gate(tuple(tasks), estimate)
    except HuggingGPTError as e:
        log.info("re-planned tasks refused: %s", e)
        st.record.rounds[-1].outcome = "refused"
        st.record.notes.append(e.user_message)
        return Notice(e.user_message)
    return None


def known_files(st: RunState) -> list[Resource]:
    """The request's resources and the files the finished tasks generated, each once."""
    files = {r.id: r for r in st.request.resources}
    for r in st.record.results.values():
        if r.status == "ok" and r.output is not None:
            files.update({f.id: f for f in r.output.files})
    return list(files.values())


async def _ask(controller: Controller, st: RunState, images: Sequence[Resource], max_pixels: int) -> Decision:
    """One re-planning call (``images`` shown as image parts to be checked), cut by the deadline or
    the user's Stop; what its answer comes to."""
    record, files = st.record, known_files(st)
    parts = await image_parts(images, max_pixels) if images else []
    messages: list[dict[str, Any]] = list(replan_messages(st.request, st.available, st.tasks, record.selections,
                                                          record.results, files, images=bool(parts)))
    schema = plan_schema(st.available)
    if parts:
        messages[-1] = {"role": "user", "content": [{"type": "text", "text": messages[-1]["content"]}, *parts]}
        schema = {**schema, "properties": {**schema["properties"], "found": {"type": "string"}},
                  "required": [*schema["required"], "found"]}
    asking = asyncio.ensure_future(controller.complete_json(
        messages, stage=REPLAN_STAGE, schema_name="task_plan", schema=schema, usage=st.usage))
    stopping = asyncio.ensure_future(st.stop.wait()) if st.stop is not None else None
    try:
        done, _ = await asyncio.wait([f for f in (asking, stopping) if f is not None], timeout=max(0.0, st.left()),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in (asking, stopping):
            if f is not None and not f.done():
                f.cancel()
        await asyncio.gather(*(f for f in (asking, stopping) if f is not None), return_exceptions=True)
    if asking not in done:
        if stopping is not None and stopping in done:
            return Decision((), "stopped")
        record.deadline_passed = True
        return Decision((), "deadline", "The run's deadline passed while the controller was re-planning; "
                                        "the answer uses what finished.")
    try:
        raw = asking.result()
        decision = accept_replan(raw, request=st.request, available=st.available, tasks=st.tasks,
                                 results=record.results, resources=files)
        return dataclasses.replace(decision, found=finding(raw)) if parts else decision
    except ControllerError as e:
        log.warning("re-planning call failed: %s", e)
        return Decision((), "error", "The controller could not be asked for a new plan, so the answer uses what finished.")
    except PlanInvalid as e:
        log.warning("re-plan rejected (%s)", e.problem)
        return Decision((), "invalid", f"The controller's new plan could not be used ({e.problem.rstrip('.')}), "
                                       "so the answer uses what finished.")


async def _execute(st: RunState, tasks: Sequence[Task]) -> AsyncIterator[Event]:
    """Run a further round's tasks in the run's execution (finished results stay and are reused)."""
    run, record = st.run, st.record
    assert run is not None
    queue: asyncio.Queue[Event] = asyncio.Queue()
    run.emit = queue.put_nowait
    run.resources.update({f.id: f for f in known_files(st)})
    for t in tasks:
        run.start(t)
    work = asyncio.create_task(run.finish(st.stop))
    try:
        async for event in events_until(queue, work):
            yield event
        record.selections, record.results = work.result()
    finally:
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
