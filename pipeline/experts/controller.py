"""Text tasks the controller LLM serves itself (``[inference] controller_tasks``): summarization,
translation, conversational, text generation. The instruction for each task is data
(``prompts/controller_tasks.json``); the call carries ``X-HuggingGPT-Stage: controller-task`` and
``X-HuggingGPT-Task: <task>``."""

from __future__ import annotations

from typing import Any

from .. import prompts
from ..errors import ExpertError
from ..llm import Controller, Usage
from ..config import OutputLimits
from ..types import Output, ResourceSink
from .base import TaskSaver, condense


class ControllerRunner:
    """:class:`pipeline.experts.base.ExpertRunner` for text tasks done by the controller LLM.

    Args:
        controller: the controller client.
        limits: ``max_text_chars`` cuts long answers (:func:`pipeline.experts.base.condense`;
            the full text is kept as a file).
    """

    def __init__(self, controller: Controller, limits: OutputLimits) -> None:
        self.controller = controller
        self.limits = limits

    async def run(
        self, task: str, model: str, args: dict[str, Any], sink: ResourceSink, *, task_id: int, usage: Usage | None = None
    ) -> Output:
        """Ask the controller to do ``task`` on the text arguments; returns its text (cut to
        ``limits.max_text_chars``).

        Raises:
            ExpertError: ``reason="unavailable"`` for a task with no instruction.
            ControllerError: the controller call failed.
            HuggingGPTError: the sink's error when the full text of a long answer cannot be stored.
        """
        instruction = prompts.controller_instructions().get(task)
        if instruction is None:
            raise ExpertError(f"The controller LLM does not serve the task {task}.", reason="unavailable")
        text = {k: v for k, v in args.items() if isinstance(v, str)}
        messages = [
            {"role": "system", "content": prompts.render("controller_task.system", instruction=instruction)},
            {"role": "user", "content": prompts.render("controller_task.user", text=text.get("text", ""),
                                                       context=text.get("context"), src_lang=text.get("src_lang"),
                                                       tgt_lang=text.get("tgt_lang"))},
        ]
        answer = await self.controller.complete_text(messages, stage="controller-task", task=task, usage=usage or Usage())
        out = await condense(Output(text=answer.strip()), TaskSaver(sink, task, task_id, self.limits))
        out.where = "controller"
        return out
