"""Stage 2, model selection (HuggingGPT §3.2).

Candidates for a task come from the catalog, filtered by what the configured backends can serve
right now, ranked by downloads, top-K kept. With expert servers (``[inference] experts_url``),
the models they list come first (the paper's hybrid endpoint prefers local models) and every
candidate says where it runs (:class:`pipeline.catalog.placement.Candidate`). One candidate:
taken without an LLM call. Several: the controller picks one from their descriptions ("in-context
task-model assignment"); a pick that is not among the candidates falls back to the top-ranked
one. The ``top`` strategy skips the LLM.
Tasks the controller serves itself and local tasks (canny edge maps) need no selection.
A captioning, VQA or document-QA task none of whose models is available goes to a vision-language
model (``image-text-to-text``) when one is, and its selection reason says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol, Sequence

import json_repair

from . import prompts
from .catalog.placement import Candidate, Mode, Placement
from .catalog.servers import ExpertServers
from .errors import ControllerError
from .experts.local import LOCAL_MODEL
from .llm import Controller, Usage
from .tasks import TASKS
from .tasks.multimodal import STANDS_IN_FOR, VLM_TASK
from .types import Selection, Task

log = logging.getLogger(__name__)

SELECTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "reason": {"type": "string"}},
    "required": ["id", "reason"],
    "additionalProperties": False,
}


class CatalogLike(Protocol):
    def candidates(self, task: str) -> list[Any]: ...


class AvailabilityLike(Protocol):
    async def filter(self, cards: list[Any]) -> list[Any]: ...


class Selector:
    """Chooses a model per task.

    Args:
        catalog: ``candidates(task)`` ranked by downloads (``pipeline.catalog.Catalog``).
        availability: ``filter(cards)`` keeps models the backends can run now.
        controller: the controller LLM (for the ``llm`` strategy).
        strategy: ``"llm"`` or ``"top"`` (``[inference] selection``).
        top_k: candidates kept per task (``[inference] top_k``).
        controller_tasks: task names the controller serves itself.
        servers: the team's expert servers (``None``: none).
        mode: ``"hybrid"``, ``"local"`` or ``"providers"`` (``[inference] mode``).
    """

    def __init__(
        self,
        catalog: CatalogLike,
        availability: AvailabilityLike,
        controller: Controller,
        *,
        strategy: str,
        top_k: int,
        controller_tasks: Sequence[str] = (),
        servers: ExpertServers | None = None,
        mode: Mode = "hybrid",
    ) -> None:
        self.catalog = catalog
        self.availability = availability
        self.controller = controller
        self.strategy = strategy
        self.top_k = top_k
        self.controller_tasks = {t for t in controller_tasks if t in TASKS and TASKS[t].controller_capable}
        self.placement = Placement(catalog, availability, servers, mode=mode)

    async def candidates(self, task: str) -> list[Candidate]:
        """Available candidates of ``task``, best first (local ones first), at most ``top_k``."""
        return await self.placement.candidates(task, self.top_k)

    def _none_left(self, task: str) -> LookupError:
        """The sentence for a task with no candidate: the provider setting it would use when that
        provider is removed or unknown
        (:meth:`pipeline.experts.providers.ProviderPolicy.problem_for`), else naming expert
        servers that are down."""
        policy = getattr(self.availability, "policy", None)
        if policy is not None and self.placement.uses_providers and (problem := policy.problem_for(task)):
            return LookupError(problem)
        down = self.placement.unreachable()
        if down:
            servers = " and ".join(down)
            noun = "server" if len(down) == 1 else "servers"
            return LookupError(f"No model that can run {task} is available right now: the expert {noun} "
                               f"{servers} could not be reached.")
        if self.placement.mode == "local" and self.placement.servers is not None:
            return LookupError(f"No expert server ({', '.join(self.placement.servers.urls)}) lists a model that can "
                               f"run {task}.")
        return LookupError(f"No model that can run {task} is available right now.")

    async def _vlm_instead(self, task: Task) -> tuple[Selection, list[str]]:
        """A vision-language model for a captioning / VQA / document-QA task none of whose own
        models is live (:data:`pipeline.tasks.multimodal.STANDS_IN_FOR`); the reason says so.

        Raises:
            LookupError: the task has no stand-in, or no VLM is live either.
        """
        if task.task not in STANDS_IN_FOR:
            raise self._none_left(task.task)
        vlms = await self.candidates(VLM_TASK)
        if not vlms:
            raise self._none_left(task.task)
        ids = [c.id for c in vlms]
        log.info("task %d: no %s model is live; %s (%s) answers instead", task.id, task.task, ids[0], VLM_TASK)
        reason = (f"no {task.task} model is available right now, so the vision-language model {ids[0]} "
                  f"({VLM_TASK}) answers instead")
        return Selection(task.id, ids[0], reason, tuple(ids), "vlm-instead", where=vlms[0].where,
                         runs_as=VLM_TASK), ids

    def placement_notes(self) -> list[str]:
        """Sentences for the user about expert servers that could not be asked (one per server)."""
        return [f"The expert server {url} could not be reached, so its models are not offered."
                for url in self.placement.unreachable()]

    def offered_tasks(self, available: frozenset[str], request_text: str) -> tuple[frozenset[str], list[str]]:
        """The tasks the planner is shown for ``request_text``, and sentences for the user about
        any left out: here all of ``available`` (:class:`pipeline.mcp_tools.ToolSelector` bounds
        the tools of MCP servers)."""
        return available, []

    async def served_tasks(self) -> set[str]:
        """Task names that can run now: local ones, controller-served ones, and those with at
        least one available candidate model; also those whose provider setting names a removed or
        unknown provider, so that a request for one is planned and fails with the sentence that
        says which setting to change (:meth:`_none_left`), not with silence."""
        names = [n for n, s in TASKS.items() if not s.local and n not in self.controller_tasks]
        found = await asyncio.gather(*(self.candidates(n) for n in names))
        served = {n for n, c in zip(names, found) if c}
        policy = getattr(self.availability, "policy", None)
        if policy is not None and self.placement.uses_providers:
            served |= {n for n in names if policy.problem_for(n)}
        if VLM_TASK in served:  # a VLM answers these when no model of theirs is live
            served |= set(STANDS_IN_FOR)
        served |= {n for n, s in TASKS.items() if s.local}
        served |= self.controller_tasks
        return served

    async def select(self, task: Task, request_text: str, usage: Usage) -> tuple[Selection, list[str]]:
        """Choose the model of ``task``.

        Returns:
            The selection and the ordered list of models to try (chosen first, then the other
            candidates as fallbacks).

        Raises:
            LookupError: no candidate can run this task now (the caller fails the task).
        """
        spec = TASKS[task.task]
        if spec.local:
            sel = Selection(task.id, LOCAL_MODEL, "computed locally, no model needed", (), "local", runner="local",
                            where="in-process")
            return sel, [LOCAL_MODEL]
        if task.task in self.controller_tasks:
            model = self.controller.model
            sel = Selection(task.id, model, "the controller LLM does this text task itself", (), "controller",
                            runner="controller", where="controller")
            return sel, [model]
        cands = await self.candidates(task.task)
        ids = [c.id for c in cands]
        where = {c.id: c.where for c in cands}
        if not cands:
            return await self._vlm_instead(task)
        if len(cands) == 1:
            return Selection(task.id, ids[0], "the only available model for this task", tuple(ids), "single",
                             where=where[ids[0]]), ids
        if self.strategy == "top":
            return Selection(task.id, ids[0], _top_reason(cands[0]), tuple(ids), "top", where=where[ids[0]]), ids
        messages = [
            {"role": "system", "content": prompts.render("selection.system")},
            {
                "role": "user",
                "content": prompts.render(
                    "selection.user",
                    request=request_text,
                    task=json.dumps({"id": task.id, "task": task.task, "args": task.args}, ensure_ascii=False),
                    candidates=json.dumps([c.prompt_view() for c in cands], ensure_ascii=False),
                ),
            },
        ]
        try:
            raw = await self.controller.complete_json(messages, stage="model-selection", schema_name="model_choice", schema=SELECTION_SCHEMA, usage=usage)
        except ControllerError as e:
            log.warning("model selection for task %d fell back to the top model: %s", task.id, e)
            return Selection(task.id, ids[0], "the controller could not be asked; took " + _first(cands[0]), tuple(ids),
                             "top", where=where[ids[0]]), ids
        choice, reason = _parse_choice(raw)
        if choice not in ids:
            log.info("task %d: controller picked %r, not a candidate; using %s", task.id, choice, ids[0])
            return (
                Selection(task.id, ids[0], "the controller's pick was not a candidate; took " + _first(cands[0]), tuple(ids),
                          "top", where=where[ids[0]]),
                ids,
            )
        order = [choice] + [i for i in ids if i != choice]
        return Selection(task.id, choice, reason or "chosen by the controller", tuple(ids), "llm", where=where[choice]), order


def _first(first: Candidate) -> str:
    return "the first-ranked model, on the team's expert server" if first.local else "the most downloaded model"


def _top_reason(first: Candidate) -> str:
    if first.local:
        return "the first-ranked model on the team's expert server (local models are preferred)"
    return "the most downloaded available model"


def _parse_choice(raw: str) -> tuple[str | None, str]:
    try:
        data = json_repair.loads(raw or "")
    except Exception:
        return None, ""
    if isinstance(data, dict):
        mid = data.get("id") or data.get("model_id") or data.get("model")
        reason = data.get("reason")
        return (mid.strip() if isinstance(mid, str) else None), (reason.strip()[:300] if isinstance(reason, str) else "")
    return None, ""
