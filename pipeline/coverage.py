"""What a run left out of a request, checked in code after planning and after execution.

HuggingGPT's response stage (§3.4) asks the controller to say what it could not do; the product
does not rely on that. This module says it from the plan and the results:

- every file the user attached to this turn (a PDF's text file and page images, a video and the
  sound and frames read from it) is used by some task, or the answer says which was not used and
  why (:func:`unused_files`); a plan that leaves one unused gets one repair round with that fact
  before it runs (:func:`plan_problem`, asked by :func:`pipeline.planning.plan_stream`);
- a video understood through some of its frames says which frames were looked at and offers the
  others (:func:`frame_sentences`);
- a result that ran elsewhere than it was meant to (another model, or another place after the
  expert server failed) says where it really ran (:func:`route_sentences`);
- a step that could not run is said with its sentence, and a run in which nothing was planned
  while a backend was down says so (:func:`coverage_report`).

A file no task could read (no task that reads its kind can run now, or a backend was down), or
nothing run while a backend was down, makes the run ``partial`` (exit status 6), never ``ok``. A
file the controller chose not to use, although a task could read it, is said with the answer and
the run stays ``ok`` (small talk with a photo attached; "caption my second photo" with two).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set as AbstractSet
from dataclasses import dataclass, field

from .tasks import TASKS
from .types import Request, Resource, Selection, Task, TaskResult, article

USER = "user"
"""The ``origin`` of a file the user attached (:attr:`pipeline.types.Resource.origin`)."""


def _label(r: Resource) -> str:
    return f"{r.id} ({r.name})" if r.name else r.id


def _parts(request: Request) -> dict[str, list[Resource]]:
    """This turn's files read out of another one (a video's sound and frames), by that file's id."""
    ids = {f.id for f in request.files}
    out: dict[str, list[Resource]] = {}
    for f in request.files:
        if f.origin in ids:
            out.setdefault(f.origin, []).append(f)
    return out


def used_ids(tasks: Iterable[Task]) -> set[str]:
    """The resource ids the tasks' arguments name (a file argument holds exactly one id)."""
    return {v for t in tasks for v in t.args.values()}


def unused_files(tasks: Iterable[Task], request: Request) -> list[Resource]:
    """The files the user attached to this turn that no task reads, neither the file itself nor
    a part read out of it (a video counts as used when one of its frames or its sound is).

    Args:
        tasks: every task planned for the run (all rounds).
        request: the request; ``files`` holds this turn's attachments and their parts.

    Returns:
        The unused attachments, in the order they were attached.
    """
    used = used_ids(tasks)
    parts = _parts(request)
    return [f for f in request.files if f.origin == USER and f.id not in used
            and not any(p.id in used for p in parts.get(f.id, ()))]


def readable_kinds(available: AbstractSet[str]) -> set[str]:
    """The kinds of file some task of ``available`` takes as an argument."""
    return {kind for name in available if name in TASKS for kind in TASKS[name].allowed.values()}


def plan_problem(tasks: Sequence[Task], request: Request, available: AbstractSet[str]) -> str | None:
    """The fact quoted to the controller in the repair round when the plan leaves an attached file
    unused that some served task could read; ``None`` when there is none.

    Source of the rule: docs/how-it-works.md, "Nothing silently dropped"."""
    readable = readable_kinds(available)
    missing = [f for f in unused_files(tasks, request) if f.kind in readable]
    if not missing:
        return None
    names = ", ".join(f"{_label(f)}, {article(f.kind)} {f.kind}" for f in missing[:8])
    return (f"The plan uses no task for {names}, which the user attached to this request; plan the task the "
            "request asks for each attached file, passing the file's id.")


def why_unused(f: Resource, available: AbstractSet[str], down: Sequence[str]) -> str:
    """One sentence: which attached file was not used, and why."""
    if f.kind not in readable_kinds(available):
        why = f"no task that reads {article(f.kind)} {f.kind} can run now"
    else:
        why = "the plan had no task for it, even after the controller was asked to add one"
    if down:
        why += " (" + " ".join(d.rstrip(".") + "." for d in down).rstrip(".") + ")"
    return f"{_label(f)} was not used: {why}."


def frame_sentences(tasks: Iterable[Task], request: Request) -> list[str]:
    """For each video some of whose frames were read: which frames were looked at, and the
    others offered by id."""
    used = used_ids(tasks)
    out = []
    for video_id, parts in _parts(request).items():
        frames = [p for p in parts if p.kind == "image"]
        seen = [p for p in frames if p.id in used]
        rest = [p for p in frames if p.id not in used]
        if not seen or not rest:
            continue
        looked = ", ".join(f"{p.id} ({p.description})" for p in seen)
        offered = ", ".join(f"{p.id} ({p.description})" for p in rest)
        out.append(f"Of {video_id} I looked only at {looked}; not at {offered}: ask about "
                   f"{' or '.join(p.id for p in rest)} to have them looked at too.")
    return out


def _place(where: str | None) -> str:
    """A route label (:attr:`pipeline.types.Selection.where`) as words."""
    if not where:
        return "an unknown place"
    kind, _, target = where.partition(" ")
    if kind == "local":
        return f"the expert server {target}"
    return f"{kind} {target}".strip() if target else kind


def route_sentences(tasks: Iterable[Task], selections: dict[int, Selection], results: dict[int, TaskResult]) -> list[str]:
    """For each task that succeeded elsewhere than it was meant to (another model after the first
    failed, or another place than the one chosen): what was tried and where it really ran."""
    out = []
    for t in tasks:
        r, s = results.get(t.id), selections.get(t.id)
        if r is None or r.status != "ok" or s is None or r.output is None:
            continue
        where = r.output.where
        other_model = r.model is not None and r.model != s.model
        if not other_model and (where is None or s.where is None or where == s.where):
            continue
        tried = f"{s.model} on {_place(s.where)}" if s.where else s.model
        ran = f"ran {r.model} on {_place(where)}" if other_model else f"ran on {_place(where)}"
        out.append(f"Task {t.id} ({t.task}): tried {tried}, it failed; {ran}.")
    return out


@dataclass
class Coverage:
    """What the answer adds about what was left out or ran elsewhere.

    Attributes:
        left_out: one sentence per part of the request not done (a step that failed, a file no
            task could read, nothing run while a backend was down): any makes the run ``partial``.
        said: the other sentences (a file the plan chose not to use, the frames looked at, where
            results really ran).
    """

    left_out: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)

    @property
    def sentences(self) -> list[str]:
        """Every sentence, for the answer and the record's notes."""
        return [*self.left_out, *self.said]

    @property
    def skipped(self) -> bool:
        """Whether part of the request was not done."""
        return bool(self.left_out)


def failed_sentences(tasks: Iterable[Task], results: dict[int, TaskResult], ids: Iterable[int]) -> list[str]:
    """One sentence per task of ``ids`` that did not succeed: what and why (its result's error)."""
    wanted = set(ids)
    out = []
    for t in tasks:
        r = results.get(t.id)
        if t.id not in wanted:
            continue
        what = "was skipped" if r is not None and r.status == "skipped" else "failed"
        why = (r.error if r is not None and r.error else "it was not started.").rstrip(".")
        why = why.removeprefix(f"{t.task} failed: ")  # the executor's sentence names the task already
        out.append(f"Task {t.id} ({t.task}) {what}: {why}.")
    return out


def coverage_report(request: Request, tasks: Sequence[Task], selections: dict[int, Selection],
                    results: dict[int, TaskResult], available: AbstractSet[str], down: Sequence[str],
                    unfinished: Sequence[int] = ()) -> Coverage:
    """The coverage of a finished execution.

    Args:
        request: the request (this turn's files and their parts).
        tasks: every task planned (all rounds).
        selections, results: by task id.
        available: the tasks the planner was offered.
        down: sentences about backends that could not be used (an expert server unreachable, an
            MCP server that did not start), as the run's notes say them.
        unfinished: ids of the tasks whose failure the run did not get past (each said, with its
            sentence: a step that could not run never vanishes).

    Returns:
        :class:`Coverage`.
    """
    report = Coverage(left_out=failed_sentences(tasks, results, unfinished))
    unused = unused_files(tasks, request)
    for f in unused:  # unread because nothing could read it: a part not done; by the controller's choice: said
        cannot = f.kind not in readable_kinds(available) or bool(down)
        (report.left_out if cannot else report.said).append(why_unused(f, available, down))
    if not tasks and down and not unused:
        report.left_out.append("Nothing was run for this request: " + " ".join(d.rstrip(".") + "." for d in down))
    report.said += frame_sentences(tasks, request)
    report.said += route_sentences(tasks, selections, results)
    return report


def answer_tail(report: Coverage) -> str:
    """What ends the answer for ``report`` (``""`` when there is nothing to say)."""
    if not report.sentences:
        return ""
    return "\n\n" + "\n".join(f"- {s}" for s in report.sentences)
