"""Stage 2, model selection (HuggingGPT §3.2).

Candidates for a task come from the catalog, filtered by what the configured backends can serve
right now, ranked by downloads, top-K kept. One candidate: taken without an LLM call. Several: the
controller picks one from their descriptions ("in-context task-model assignment"); a pick that is
not among the candidates falls back to the top-ranked one. The ``top`` strategy skips the LLM.
Tasks the controller serves itself and local tasks (canny edge maps) need no selection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol, Sequence

import json_repair

from . import prompts
from .errors import ControllerError
from .experts.local import LOCAL_MODEL
from .llm import Controller, Usage
from .tasks import TASKS
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
        strategy: ``"llm"`` or ``"top"``.
        top_k: candidates kept per task.
        controller_tasks: task names the controller serves itself.
    """

    def __init__(
        self,
        catalog: CatalogLike,
        availability: AvailabilityLike,
        controller: Controller,
        *,
        strategy: str = "llm",
        top_k: int = 5,
        controller_tasks: Sequence[str] = (),
    ) -> None:
        self.catalog = catalog
        self.availability = availability
        self.controller = controller
        self.strategy = strategy
        self.top_k = top_k
        self.controller_tasks = {t for t in controller_tasks if t in TASKS and TASKS[t].controller_capable}

    async def candidates(self, task: str) -> list[Any]:
        """Available candidates of ``task``, best first, at most ``top_k``."""
        ranked = self.catalog.candidates(task)
        if not ranked:
            return []
        # filter in slices so that a provider lookup is only made for models that may be used
        out: list[Any] = []
        step = max(self.top_k, 5)
        for start in range(0, len(ranked), step):
            out += await self.availability.filter(list(ranked[start : start + step]))
            if len(out) >= self.top_k:
                break
        return out[: self.top_k]

    async def served_tasks(self) -> set[str]:
        """Task names that can run now: local ones, controller-served ones, and those with at
        least one available candidate model."""
        names = [n for n, s in TASKS.items() if not s.local and n not in self.controller_tasks]
        found = await asyncio.gather(*(self.candidates(n) for n in names))
        served = {n for n, c in zip(names, found) if c}
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
            sel = Selection(task.id, LOCAL_MODEL, "computed locally, no model needed", (), "local", runner="local")
            return sel, [LOCAL_MODEL]
        if task.task in self.controller_tasks:
            model = self.controller.model
            sel = Selection(task.id, model, "the controller LLM does this text task itself", (), "controller", runner="controller")
            return sel, [model]
        cands = await self.candidates(task.task)
        ids = [c.id for c in cands]
        if not cands:
            raise LookupError(f"No model that can run {task.task} is available right now.")
        if len(cands) == 1:
            return Selection(task.id, ids[0], "the only available model for this task", tuple(ids), "single"), ids
        if self.strategy == "top":
            return Selection(task.id, ids[0], "the most downloaded available model", tuple(ids), "top"), ids
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
            return Selection(task.id, ids[0], "the controller could not be asked; took the most downloaded model", tuple(ids), "top"), ids
        choice, reason = _parse_choice(raw)
        if choice not in ids:
            log.info("task %d: controller picked %r, not a candidate; using %s", task.id, choice, ids[0])
            return (
                Selection(task.id, ids[0], "the controller's pick was not a candidate; took the most downloaded model", tuple(ids), "top"),
                ids,
            )
        order = [choice] + [i for i in ids if i != choice]
        return Selection(task.id, choice, reason or "chosen by the controller", tuple(ids), "llm"), order


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
