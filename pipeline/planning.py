"""Stage 1, task planning (HuggingGPT §3.1).

The controller turns a request into ``[{"task", "id", "dep", "args"}]``. Its answer is untrusted:
it is repaired (``json_repair``), then validated against the task vocabulary, the argument kinds
of each task, the dependency graph (``graphlib``: no cycles, no self or dangling dependencies),
the placeholders (``<resource>-N`` must point at a dependency that produces that modality; a
forgotten dependency is added) and the conversation's resources (file arguments may only name
resources of this conversation: never a URL or a path). An invalid plan, or one that leaves a file
the user attached unused (:mod:`pipeline.coverage`), gets one repair round with the controller,
quoting the problem; a second failure is a :class:`~pipeline.errors.PlanError`.
Before validation, :mod:`pipeline.plan_normalise` reads the forms real controllers write for what
they mean (tool names, arguments by position, decorated file names); :func:`read_plan` does both.

The prompt (first part below) holds the specification with the served tasks, the demonstrations,
the chat log (earlier turns, the resources in them and what was run for them), the request and its
resources; :func:`plan_schema` is a plan's JSON schema for structured output.

The plan is asked for as a stream and parsed as it arrives (``jiter``'s partial mode; last part
below), with eager dispatch after LLMCompiler (Kim et al. 2023, "An LLM Compiler for Parallel
Function Calling", §3.2): a task record is handed out as soon as it is complete and the plan up to
it is valid on its own (:func:`read_plan` on that prefix: known task, argument kinds, dependencies
and placeholders pointing at tasks already seen, resources that exist). A record that is not valid
with those before it holds early dispatch back until the records it needs have arrived. When the
stream ends, the whole plan is validated as :func:`plan` does; if it is invalid, the tasks handed
out early are withdrawn (:class:`~pipeline.types.PlanDiscarded`) and the repair round runs
(streamed and dispatched the same way); if it is invalid again, :class:`PlanError`.
"""

from __future__ import annotations

import contextlib
import difflib
import graphlib
import json
import logging
import re
from collections.abc import AsyncIterator, Iterable, Sequence, Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

import jiter
import json_repair

from . import coverage, prompts
from .errors import PlanError
from .llm import Controller, Usage
from .plan_normalise import Note, named_kinds, normalise_plan
from .tasks import TASKS, canonical_task
from .types import (
    MEDIA_MODALITIES, PLACEHOLDER, SUSPECT_REFERENCE, PlanDiscarded, PlanReady, Request, Resource, Task, TaskPlanned,
    Turn, article, placeholder_id,
)

log = logging.getLogger(__name__)

MAX_TASKS = 24
MAX_TEXT_ARG = 20_000  # characters


# -- the prompt ------------------------------------------------------------------------------------

def plan_schema(available: Iterable[str]) -> dict[str, Any]:
    """JSON schema of a plan for structured output (OpenAI ``response_format`` ``json_schema``)."""
    available = set(available)  # MCP tools' argument keys only for those offered: the registry may hold thousands
    keys = {k for name, spec in TASKS.items() if spec.domain != "mcp" or name in available for k in spec.allowed}
    arg_props = {k: {"type": "string"} for k in sorted(keys)}
    return {
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "task": {"type": "string", "enum": sorted(available)},
                        "id": {"type": "integer"},
                        "dep": {"type": "array", "items": {"type": "integer"}},
                        "args": {"type": "object", "properties": arg_props, "additionalProperties": False},
                    },
                    "required": ["task", "id", "dep", "args"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["tasks"],
        "additionalProperties": False,
    }


def chat_log_text(history: Sequence[Turn]) -> str:
    """The chat log as prompt text, newest turn first (the history is already trimmed)."""
    lines = []
    for turn in history:
        files = ", ".join(f"{r.id} ({r.kind}, {r.origin}{': ' + r.description if r.description else ''})" for r in turn.resources)
        lines.append(f"[turn {turn.index}] user: {turn.user_text}")
        if turn.answer:
            lines.append(f"[turn {turn.index}] assistant: {turn.answer}")
        if files:
            lines.append(f"[turn {turn.index}] files: {files}")
        if turn.work:
            lines.append(f"[turn {turn.index}] tasks run: {turn.work}")
        if turn.status != "ok":
            lines.append(f"[turn {turn.index}] status: {turn.status}")
    return "\n".join(lines)


def task_lines(available: Iterable[str]) -> list[dict[str, str]]:
    """The served tasks as the prompts list them: name, description, argument kinds (``?``: optional)."""
    out = []
    for name in sorted(available):
        spec = TASKS[name]
        args = ", ".join(f"{k}" + ("" if k in spec.required else "?") for k in spec.allowed)
        out.append({"name": name, "description": spec.description, "args": args})
    return out


def planning_messages(request: Request, available: AbstractSet[str], problem: str | None = None) -> list[dict[str, str]]:
    """Messages for the planning call: specification, demonstrations (only those whose tasks are
    available), then the chat log, the request, its resources and the available tasks. The
    specification says when to use a video VLM, an audio language model or an instruction edit
    only when that task is available (a video question goes to the frames otherwise)."""
    system = prompts.render("planning.system", tasks=task_lines(available), video_vlm="video-text-to-text" in available,
                            audio_lm="audio-text-to-text" in available, edits="image-text-to-image" in available)
    messages = [{"role": "system", "content": system}]
    for demo in prompts.demonstrations():
        if all(t["task"] in available for t in demo["tasks"]):
            messages.append(
                {
                    "role": "user",
                    "content": prompts.render(
                        "planning.user",
                        history="",
                        context="",
                        request=demo["request"],
                        resources=json.dumps(demo["resources"]),
                        available=json.dumps(sorted(available)),
                        problem=None,
                    ),
                }
            )
            messages.append({"role": "assistant", "content": json.dumps({"tasks": demo["tasks"]})})
    messages.append(
        {
            "role": "user",
            "content": prompts.render(
                "planning.user",
                history=chat_log_text(request.history),
                context=request.context,
                request=request.text,
                resources=json.dumps([r.prompt_view() for r in request.resources], ensure_ascii=False),
                available=json.dumps(sorted(available)),
                problem=problem,
            ),
        }
    )
    return messages


# -- reading a plan --------------------------------------------------------------------------------

class PlanInvalid(ValueError):
    """A plan failed parsing or validation.

    Attributes:
        problem: the sentence quoted to the controller in the repair round (which task, which
            argument, what exists instead).
        reason: a short code for counting (``"unknown-task"``, ``"unknown-file"``,
            ``"self-reference"``, ... ``eval plans`` reports them by code).
        said: the controller's own words when it answered in prose instead of a plan (a
            controller that declines to plan says why), whitespace collapsed and cut to
            :data:`MAX_SAID` characters; ``None`` otherwise.
    """

    def __init__(self, problem: str, reason: str = "invalid", said: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.reason = reason
        self.said = said


MAX_SAID = 500
"""Characters of a prose reply quoted back (to the controller in the repair round, then to the user)."""


def _said(text: str) -> str:
    words = " ".join(text.split())
    return words if len(words) <= MAX_SAID else words[: MAX_SAID - 1] + "…"


def plan_error(e: PlanInvalid) -> PlanError:
    """The user's sentence for a plan still invalid after the repair round: the controller's own
    words when it answered in prose (it declined to plan), else the problem with its plan."""
    if e.said:
        return PlanError(f"I could not turn your request into a plan of tasks; the controller answered: “{e.said}”",
                         f"plan invalid after repair: the reply was prose, not a plan: {e.said!r}")
    return PlanError(
        f"I could not turn your request into a valid plan of tasks, even after asking the controller to fix it: {e.problem}",
        f"plan invalid after repair: {e.problem}",
    )


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_plan(raw: str) -> list[Any]:
    """Parse the controller's answer into a list of raw task records.

    Accepts ``{"tasks": [...]}``, a bare list, a single task object, Markdown fences, trailing
    commas, single quotes and truncated JSON (repaired by ``json_repair``).

    Returns:
        The list of raw task records (not yet validated); ``[]`` for an explicit empty plan.

    Raises:
        PlanInvalid: the answer holds no JSON plan at all.
    """
    text = (raw or "").strip()
    if not text:
        raise PlanInvalid("The reply was empty; it must be a JSON object {\"tasks\": [...]}.", "not-a-plan")
    try:
        data = json_repair.loads(text)
    except Exception as e:  # json_repair raises rarely, but never let it escape
        raise PlanInvalid(f"The reply is not JSON ({e.__class__.__name__}).", "not-a-plan") from None
    if isinstance(data, dict):
        if "tasks" in data:
            data = data["tasks"]
        elif "task" in data:
            data = [data]
        else:
            raise PlanInvalid('The reply is a JSON object without a "tasks" list.', "not-a-plan")
    if data == "" or data is None:  # prose: a controller declining to plan says why
        said = _said(text)
        raise PlanInvalid(f'The reply is text, not JSON: “{said}”; it must be a JSON object {{"tasks": [...]}}.',
                          "not-a-plan", said)
    if not isinstance(data, list):
        raise PlanInvalid('"tasks" must be a JSON list of task objects.', "not-a-plan")
    return data


# ---------------------------------------------------------------------------------------------
# Validation


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise PlanInvalid(f"{what} must be an integer, not {value!r}.", "bad-record")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value.strip())
    raise PlanInvalid(f"{what} must be an integer, not {str(value)[:40]!r}.", "bad-record")


def _resource_index(resources: Sequence[Resource]) -> dict[str, Resource]:
    """Map ids and unique user file names (case-insensitive) to resources."""
    index: dict[str, Resource] = {}
    names: dict[str, list[Resource]] = {}
    for r in resources:
        index[r.id.lower()] = r
        if r.name:
            names.setdefault(r.name.lower(), []).append(r)
    for name, rs in names.items():
        if len(rs) == 1 and name not in index:
            index[name] = rs[0]
    return index


def file_hint(kind: str, resources: Sequence[Resource]) -> str:
    """What a repair round is told to give for a file of ``kind``, naming the conversation's files
    of that kind (at most 8): ``"the images of this conversation are image-1 (example.png),
    image-2: give one of these ids or <resource>-N"``, ``"the image of this conversation is
    image-1 (example.png): give its id or <resource>-N"``, or ``"this conversation has no image:
    give <resource>-N of a task that produces one"``."""
    files = [r.id + (f" ({r.name})" if r.name else "") for r in resources if r.kind == kind]
    if not files:
        return f"this conversation has no {kind}: give <resource>-N of a task that produces one"
    if len(files) == 1:
        return f"the {kind} of this conversation is {files[0]}: give its id or <resource>-N"
    more = " ..." if len(files) > 8 else ""
    return f"the {kind}s of this conversation are {', '.join(files[:8])}{more}: give one of these ids or <resource>-N"


def validate_plan(
    raw_tasks: Iterable[Any], *, available: AbstractSet[str], resources: Sequence[Resource], request_text: str = ""
) -> list[Task]:
    """Validate raw task records into :class:`Task` objects.

    Args:
        raw_tasks: records from :func:`parse_plan`.
        available: canonical task names the configured backends can serve right now (a registry
            task not among them is kept, and fails at model selection with a sentence; an MCP tool
            not among them is refused).
        resources: the conversation's resources; file arguments may only name these (by id, or by
            the user's file name when unique).
        request_text: the user's request; a task's optional arguments the plan leaves out are read
            from it where the task's entry says how (``TaskSpec.from_request``: languages to translate).

    Returns:
        Tasks ordered by id (the graph has no cycle; the scheduler starts each task when its own
        dependencies are done, whatever the order); file arguments rewritten to resource ids;
        dependencies implied by placeholders added.

    Raises:
        PlanInvalid: with the first problem found, phrased for the controller's repair round.
    """
    items = list(raw_tasks)
    if len(items) > MAX_TASKS:
        raise PlanInvalid(f"The plan has {len(items)} tasks; at most {MAX_TASKS} are allowed.", "too-many-tasks")
    drafts: list[_Draft] = []
    seen: set[int] = set()
    for pos, item in enumerate(items):
        drafts.append(_draft(pos, item, available, seen))
    plan = _PlanContext({d.tid: TASKS[d.name].outputs for d in drafts}, _resource_index(resources), resources)
    tasks: dict[int, Task] = {}
    for draft in drafts:
        tasks[draft.tid] = _resolve(draft, plan, request_text)
    _check_acyclic({t.id: set(t.dep) for t in tasks.values()})
    return [tasks[t] for t in sorted(tasks)]  # by id, as users read a plan; the scheduler needs no order


class ReadPlan(NamedTuple):
    """A plan read from records: its validated tasks and what normalisation changed to get there."""

    tasks: list[Task]
    notes: tuple[Note, ...]


def read_plan(
    raw_tasks: Iterable[Any], *, available: AbstractSet[str], resources: Sequence[Resource], request_text: str = ""
) -> ReadPlan:
    """Normalise (:func:`pipeline.plan_normalise.normalise_plan`), then :func:`validate_plan`.

    Raises:
        PlanInvalid: the normalised plan is still invalid (the first problem, for the repair round).
    """
    normalised = normalise_plan(list(raw_tasks), resources=resources)
    tasks = validate_plan(normalised.records, available=available, resources=resources, request_text=request_text)
    for note in normalised.notes:
        log.info("plan normalised (%s): %s", note.rule, note.text)
    return ReadPlan(tasks, normalised.notes)


class _Draft(NamedTuple):
    """One task record, checked on its own (before the plan as a whole)."""

    tid: int
    name: str
    deps: set[int]
    args: dict[str, str]


class _PlanContext(NamedTuple):
    """What resolving a task's arguments needs: task id -> the modalities its task produces (the
    plan's ids are its keys), and the conversation's resources (also indexed by id and name)."""

    outputs: dict[int, tuple[str, ...]]
    index: dict[str, Resource]
    resources: Sequence[Resource]


def _draft(pos: int, item: Any, available: AbstractSet[str], seen: set[int]) -> _Draft:
    """One record on its own: a new id (added to ``seen``), a served task, its deps and args."""
    if not isinstance(item, dict):
        raise PlanInvalid(f"Item {pos} of the plan is not a task object.", "bad-record")
    if "id" not in item:
        raise PlanInvalid(f"Item {pos} of the plan has no \"id\".", "bad-record")
    tid = _as_int(item["id"], f'The "id" of item {pos}')
    if tid < 0:
        raise PlanInvalid(f"Task id {tid} is negative; ids start at 0.", "bad-record")
    if tid in seen:
        raise PlanInvalid(f"Task id {tid} is used twice.", "bad-record")
    seen.add(tid)
    name_raw = item.get("task")
    if not isinstance(name_raw, str) or not name_raw.strip():
        raise PlanInvalid(f'Task {tid} has no "task" name.', "bad-record")
    name = canonical_task(name_raw)
    if name is None:
        close = difflib.get_close_matches("-".join(name_raw[:60].lower().split()), sorted(available), n=3, cutoff=0.6)
        hint = f" (the closest: {', '.join(close)})" if close else ""
        raise PlanInvalid(f"Task {tid} uses an unknown task {name_raw[:60]!r}; use one of the listed tasks{hint}.",
                          "unknown-task")
    if name not in available and TASKS[name].domain == "mcp":
        raise PlanInvalid(f"Task {tid} uses {name!r}, which cannot be served right now; use only the listed tasks.",
                          "not-served")
    # A registry task no backend serves now stays in the plan: it fails at model selection with
    # the sentence saying why (the expert server that is down, the mode), never vanishes.
    return _Draft(tid, name, _draft_deps(tid, item.get("dep", [])), _draft_args(tid, name, item.get("args", {})))


def _draft_deps(tid: int, dep_raw: Any) -> set[int]:
    """A record's ``dep``: a list, one id or nothing; ``-1`` (the paper's "no dependency") dropped."""
    if dep_raw is None:
        dep_raw = []
    if not isinstance(dep_raw, list):
        dep_raw = [dep_raw]
    deps = {_as_int(d, f'A "dep" entry of task {tid}') for d in dep_raw}
    deps.discard(-1)
    if tid in deps:
        raise PlanInvalid(f"Task {tid} depends on itself; a task with no dependency has \"dep\": [-1].",
                          "bad-dependency")
    return deps


def _draft_args(tid: int, name: str, args_raw: Any) -> dict[str, str]:
    """A record's ``args``: lower-case keys, stripped strings (numbers, text line lists; no nulls)."""
    if not isinstance(args_raw, dict):
        takes = ", ".join(f'"{k}"' for k in TASKS[name].allowed)
        raise PlanInvalid(f'The "args" of task {tid} ({name}) must be an object of argument to value; it takes {takes}.',
                          "bad-arguments")
    args: dict[str, str] = {}
    for key, value in args_raw.items():
        k = str(key).strip().lower()
        if value is None:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value) and k in ("text", "context"):
            value = "\n".join(value)
        if not isinstance(value, str):
            raise PlanInvalid(f'Argument "{k}" of task {tid} must be a string.', "bad-arguments")
        args[k] = value.strip()
    return args


def _resolve(draft: _Draft, plan: _PlanContext, request_text: str) -> Task:
    """Check a draft against the plan (dependencies exist, arguments the task takes and needs) and
    resolve its arguments; dependencies implied by placeholders are added."""
    tid, name, deps, args = draft
    spec = TASKS[name]
    for d in deps:
        if d not in plan.outputs:
            raise PlanInvalid(f"Task {tid} depends on task {d}, which is not in the plan.", "bad-dependency")
    for key in args:
        if key not in spec.allowed:
            allowed = ", ".join(sorted(spec.allowed))
            raise PlanInvalid(f'Task {tid} ({name}) takes no "{key}" argument; it takes {allowed}.', "unknown-argument")
    for key in spec.required:
        if not args.get(key):
            kind = spec.allowed[key]
            give = file_hint(kind, plan.resources) if kind in MEDIA_MODALITIES else "give the text, or <resource>-N"
            raise PlanInvalid(f'Task {tid} ({name}) needs {article(key)} "{key}" argument: {give}.', "missing-argument")
    for key, value in (spec.from_request(request_text) if spec.from_request and request_text else {}).items():
        args.setdefault(key, value)
    final: dict[str, str] = {}
    for key, value in args.items():
        kind = spec.allowed[key]
        refs = _references(tid, key, kind, value, deps, plan)
        if kind in MEDIA_MODALITIES:
            final[key] = _media_argument(tid, key, kind, value, refs, plan)
        else:
            final[key] = _text_argument(tid, key, value, refs, plan)
    return Task(id=tid, task=name, dep=tuple(sorted(deps)), args=final)


def _references(tid: int, key: str, kind: str, value: str, deps: set[int], plan: _PlanContext) -> list[int]:
    """The task ids ``value`` refers to (``<resource>-N``), each checked: another task of the
    plan producing ``kind``; a reference missing from ``deps`` is added there."""
    refs = [placeholder_id(m) for m in PLACEHOLDER.finditer(value)]
    for n in refs:
        if n == tid:
            raise PlanInvalid(
                f'Task {tid} uses its own output <resource>-{n} as "{key}", which no task can do; '
                f"{file_hint(kind, plan.resources)}.",
                "self-reference")
        if n not in plan.outputs:
            raise PlanInvalid(f"Task {tid} uses <resource>-{n}, but there is no task {n}.", "bad-reference")
        if kind not in plan.outputs[n]:
            made = "/".join(plan.outputs[n])
            raise PlanInvalid(f'Task {tid} passes <resource>-{n} as "{key}" ({kind}), but task {n} produces {made}.',
                              "wrong-kind")
        if n not in deps:
            log.info("plan: adding implied dependency %d -> %d", tid, n)
            deps.add(n)
    return refs


def _media_argument(tid: int, key: str, kind: str, value: str, refs: list[int], plan: _PlanContext) -> str:
    """A file argument: one ``<resource>-N``, or a resource of this conversation of that kind
    (by id or unique file name), rewritten to its id."""
    if refs:
        if PLACEHOLDER.sub("", value).strip():
            raise PlanInvalid(f'Argument "{key}" of task {tid} must be one file, not text around <resource>-{refs[0]}.',
                              "bad-reference")
        return f"<resource>-{refs[0]}"
    res = plan.index.get(value.lower())
    if res is None:
        raise PlanInvalid(
            f'Argument "{key}" of task {tid} is {value[:80]!r}, which is not {article(kind)} {kind} of this '
            f"conversation; {file_hint(kind, plan.resources)}.",
            "unknown-file",
        )
    if res.kind != kind:
        raise PlanInvalid(f'Argument "{key}" of task {tid} names {res.id}, which is {res.kind}, not {kind}; '
                          f"{file_hint(kind, plan.resources)}.", "wrong-kind")
    return res.id


def _text_argument(tid: int, key: str, value: str, refs: list[int], plan: _PlanContext) -> str:
    """A text argument: a text file of this conversation (by id or name), or text whose
    references are rewritten to ``<resource>-N``; an odd reference-like form is refused."""
    document = plan.index.get(value.lower()) if not refs else None
    if document is not None and document.kind == "text":  # a text file, passed by id
        return document.id
    if len(value) > MAX_TEXT_ARG:
        raise PlanInvalid(f'Argument "{key}" of task {tid} is longer than {MAX_TEXT_ARG} characters.', "too-long")
    _refuse_file_as_text(tid, key, value, plan)
    odd = SUSPECT_REFERENCE.search(PLACEHOLDER.sub("", value))
    if odd:
        raise PlanInvalid(
            f'Argument "{key}" of task {tid} contains {odd.group(0)!r}, which is not a reference this '
            "system understands; write <resource>-N for the output of task N.",
            "bad-reference",
        )
    return PLACEHOLDER.sub(lambda m: f"<resource>-{placeholder_id(m)}", value)


def _refuse_file_as_text(tid: int, key: str, value: str, plan: _PlanContext) -> None:
    """Refuse a text argument that is only words naming a file the user attached ("this PDF"
    for a PDF whose pages became images): the task would read those words, never the file."""
    kinds = named_kinds(value)
    files = [r for r in plan.resources if r.origin == "user" and kinds is not None and r.kind in kinds]
    if not files:
        return
    named = ", ".join(f"{r.id} ({r.kind}{': ' + r.name if r.name else ''})" for r in files[:8])
    raise PlanInvalid(
        f'Argument "{key}" of task {tid} is {value[:80]!r}, which names the user\'s file, not its text: the file is {named}. '
        "Have a task read it (image-to-text or document-question-answering for a page image, "
        "automatic-speech-recognition for a recording) and pass its <resource>-N, or pass a text file's id.",
        "file-as-text")


def _check_acyclic(graph: dict[int, set[int]]) -> None:
    """Refuse a dependency cycle (``graphlib``)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        cycle = " -> ".join(str(n) for n in e.args[1])
        raise PlanInvalid(f"The dependencies form a cycle ({cycle}).", "cycle") from None


async def plan(controller: Controller, request: Request, available: AbstractSet[str], usage: Usage) -> list[Task]:
    """Run task planning with one repair round (for an invalid plan, or one that leaves a file the
    user attached unused: :func:`pipeline.coverage.plan_problem`).

    Returns:
        The validated tasks (``[]``: the controller answers directly).

    Raises:
        PlanError: the plan was still invalid after the repair round (message quotes the problem).
        ControllerError: the controller failed.
    """
    schema = plan_schema(available)
    messages = planning_messages(request, available)
    raw = await controller.complete_json(messages, stage="task-planning", schema_name="task_plan", schema=schema, usage=usage)
    try:
        tasks = read_plan(parse_plan(raw), available=available, resources=request.resources, request_text=request.text).tasks
        problem = coverage.plan_problem(tasks, request, available)  # an attached file no task reads
        if problem is None:
            return tasks
    except PlanInvalid as e:
        problem = e.problem
    log.warning("plan rejected (%s); raw=%r", problem, raw[:500])
    usage.plan_repairs += 1
    repair = planning_messages(request, available, problem=problem)
    repair.insert(-1, {"role": "assistant", "content": raw[:4000]})
    raw2 = await controller.complete_json(repair, stage="task-planning", schema_name="task_plan", schema=schema, usage=usage)
    try:
        return read_plan(parse_plan(raw2), available=available, resources=request.resources, request_text=request.text).tasks
    except PlanInvalid as e:
        log.warning("plan rejected after repair (%s); raw=%r", e.problem, raw2[:500])
        raise plan_error(e) from None


# -- the plan as a stream, with eager dispatch -----------------------------------------------------

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
    """Run task planning with one repair round, handing out tasks while the plan streams. The
    repair round is asked for an invalid plan, and for a valid one that leaves a file the user
    attached unused (:func:`pipeline.coverage.plan_problem`; the repaired plan runs even if it
    still does: the answer then says so).

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
                raise plan_error(e) from None
            continue
        uncovered = coverage.plan_problem(tasks, request, available) if number == 1 else None
        if uncovered:  # an attached file no task reads: the same repair round, with that fact
            attempt.problem = uncovered
            log.warning("plan leaves an attachment unused (%s); raw=%r", uncovered, attempt.raw[:500])
            if attempt.started:
                yield PlanDiscarded(uncovered, tuple(sorted(attempt.started)))
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
    that form a valid plan prefix is handed out once (``attempt.started``). The answer so far is
    parsed again only when a delta brings a ``}``: no record can become complete without one."""
    seen = deltas = 0
    async for delta in stream:
        attempt.raw += delta
        deltas += 1
        if deltas < 2 or "}" not in delta:  # a whole answer in one piece (no streaming) is not "early"
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
