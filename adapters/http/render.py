"""The pipeline's events as OpenAI chat completion objects: progress text, answer deltas, file
links, and the ``chat.completion`` / ``chat.completion.chunk`` bodies (OpenAI API reference).

Progress (``[server] progress``):

* ``"reasoning"``: one line per step (plan, model choice, task start/end, notices) as
  ``delta.reasoning_content``, the field reasoning models use and chat UIs (Open WebUI, LibreChat)
  fold into a "thinking" box; plain OpenAI clients ignore it;
* ``"preamble"``: one short line in the content before the answer ("Planned 2 tasks: ...");
* ``"none"``: the answer only.

Generated files follow the answer as links to ``/v1/files/{id}``; images as Markdown images.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from adapters.progress import replan_sentence
from bot.tokens import count_tokens
from pipeline.types import (
    Event, ModelSelected, Notice, PlanDiscarded, PlanReady, ReplanStarted, Resource, TaskFailed, TaskFinished,
    TaskPlanned, TaskSkipped, TaskStarted,
)

MODEL_ID = "hugginggpt"
"""The model name clients ask for."""


def progress_line(event: Event) -> str | None:
    """One line for the reasoning view of ``event`` (``None`` for events that show nothing)."""
    if isinstance(event, TaskPlanned):
        return f"Task {event.task.id} ({event.task.task}) starts while the plan is being written."
    if isinstance(event, PlanDiscarded):
        return f"The plan was not valid ({event.problem}); asking for a corrected plan."
    if isinstance(event, PlanReady):
        if not event.tasks:
            return "Task planning: no model is needed; answering directly."
        steps = "; ".join(f"{t.id}: {t.task}" + (f" after {', '.join(map(str, t.dep))}" if t.dep else "")
                          for t in event.tasks)
        return f"Task planning: {len(event.tasks)} task{'s' if len(event.tasks) != 1 else ''} ({steps})."
    if isinstance(event, ModelSelected):
        s = event.selection
        return f"Model selection: task {s.task_id} uses {s.model}" + (f" ({s.reason})" if s.reason else "") + "."
    if isinstance(event, TaskStarted):
        return f"Task {event.task_id} running on {event.model}."
    if isinstance(event, TaskFinished):
        r = event.result
        took = f" in {r.finished - r.started:.1f} s" if r.started is not None and r.finished is not None else ""
        return f"Task {r.task_id} done{took}."
    if isinstance(event, (TaskFailed, TaskSkipped)):
        r = event.result
        return f"Task {r.task_id} {'failed' if isinstance(event, TaskFailed) else 'skipped'}: {r.error}"
    if isinstance(event, Notice):
        return event.text
    if isinstance(event, ReplanStarted):
        return replan_sentence(event)
    return None


def preamble(event: PlanReady) -> str:
    """The short preamble of ``[server] progress = "preamble"`` (empty for a direct answer)."""
    if not event.tasks:
        return ""
    names = ", ".join(t.task for t in event.tasks)
    return f"_Planned {len(event.tasks)} task{'s' if len(event.tasks) != 1 else ''}: {names}._\n\n"


def file_links(files: list[Resource], url_of: Callable[[Resource], str]) -> str:
    """Markdown after the answer: ``![image-1](url)`` for images, ``[audio-1](url)`` otherwise."""
    if not files:
        return ""
    lines = [f"![{f.id}]({url_of(f)})" if f.kind == "image" else f"[{f.id} ({f.mime})]({url_of(f)})" for f in files]
    return "\n\n" + "\n\n".join(lines)


def usage(prompt: str, completion: str) -> dict[str, int]:
    """``usage`` of a reply: token counts estimated offline (:func:`bot.tokens.count_tokens`, an
    upper bound; the controller's several calls are not what the client asked for)."""
    p, c = count_tokens(prompt), count_tokens(completion)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


class Completion:
    """Builds the objects of one reply, all with the same ``id`` and ``created``."""

    def __init__(self, request_id: str) -> None:
        self.id = f"chatcmpl-{request_id}"
        self.created = int(time.time())

    def chunk(self, delta: dict[str, Any] | None = None, finish_reason: str | None = None,
              usage_: dict[str, int] | None = None, choices: bool = True) -> dict[str, Any]:
        """A ``chat.completion.chunk`` (``choices=False``: the usage chunk, with no choices)."""
        body: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                "model": MODEL_ID, "system_fingerprint": None, "choices": []}
        if choices:
            body["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}]
        if usage_ is not None:
            body["usage"] = usage_
        return body

    def whole(self, content: str, reasoning: str | None, usage_: dict[str, int], finish_reason: str = "stop") -> dict[str, Any]:
        """A ``chat.completion``."""
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if reasoning:
            message["reasoning_content"] = reasoning
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": MODEL_ID,
                "system_fingerprint": None, "usage": usage_,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}]}
