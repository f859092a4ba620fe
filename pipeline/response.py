"""Stage 4, response generation (HuggingGPT §3.4).

The controller receives the request, the plan, the model choices and the results, with large
outputs condensed (long texts cut, long lists shortened, masks and raw arrays dropped), and
streams an answer that first answers the request and then explains the workflow.
"""

from __future__ import annotations

import json
from typing import Any

from . import prompts
from .planning import chat_log_text
from .types import Request, Selection, Task, TaskResult

MAX_TEXT = 1500  # characters of one task's text output in the prompt
MAX_ITEMS = 10  # list items kept per structured field
_DROP_KEYS = {"mask", "masks", "image", "bytes", "array", "raw"}


def condense(value: Any, depth: int = 0) -> Any:
    """Shrink a JSON-able structure for a prompt: strings ≤ 300 chars, lists ≤ 10 items (with a
    count of the rest), masks/raw arrays dropped, floats rounded to 3 places, depth ≤ 4."""
    if depth > 4:
        return "…"
    if isinstance(value, dict):
        return {k: condense(v, depth + 1) for k, v in value.items() if k not in _DROP_KEYS}
    if isinstance(value, list):
        items = [condense(v, depth + 1) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"… {len(value) - MAX_ITEMS} more")
        return items
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, str) and len(value) > 300:
        return value[:300] + "…"
    return value


def results_view(tasks: list[Task], results: dict[int, TaskResult]) -> dict[str, Any]:
    """The results as the response prompt shows them, by task id (strings)."""
    view: dict[str, Any] = {}
    for t in tasks:
        r = results.get(t.id)
        if r is None:
            continue
        entry: dict[str, Any] = {"task": t.task, "status": r.status}
        if r.output is not None:
            if r.output.text:
                text = r.output.text
                entry["text"] = text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"
            if r.output.files:
                entry["files"] = [{"id": f.id, "kind": f.kind, "description": f.description} for f in r.output.files]
            if r.output.data is not None:
                entry["data"] = condense(r.output.data.to_json())
        if r.error:
            entry["error"] = r.error
        view[str(t.id)] = entry
    return view


def response_messages(
    request: Request, tasks: list[Task], selections: dict[int, Selection], results: dict[int, TaskResult]
) -> list[dict[str, str]]:
    """Messages for the response call (or the direct answer when the plan is empty)."""
    system = prompts.render("response.system" if tasks else "direct.system")
    user = prompts.render(
        "response.user",
        history=chat_log_text(request.history),
        context=request.context,
        request=request.text,
        plan=json.dumps([t.to_json() for t in tasks], ensure_ascii=False),
        selections=json.dumps(
            {str(k): {"model": s.model, "reason": s.reason} for k, s in sorted(selections.items())}, ensure_ascii=False
        ),
        results=json.dumps(results_view(tasks, results), ensure_ascii=False),
    )
    if not tasks and request.resources:
        user += "\n<resources>" + json.dumps([r.prompt_view() for r in request.resources], ensure_ascii=False) + "</resources>"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def fallback_answer(
    tasks: list[Task], selections: dict[int, Selection], results: dict[int, TaskResult], reason: str
) -> str:
    """The answer written without the controller, when the run's deadline left no time to ask it.

    Args:
        tasks: the plan, in order.
        selections: task id to the model chosen.
        results: task id to result (missing: never started).
        reason: one sentence saying why the controller was not asked (the deadline).

    Returns:
        Markdown: the reason, each finished task's text result (cut to :data:`MAX_TEXT`
        characters) and files, then the tasks that did not finish with their sentences.
    """
    lines = [reason]
    done = [t for t in tasks if (r := results.get(t.id)) is not None and r.status == "ok"]
    if done:
        lines.append("")
        lines.append("Finished:")
        for t in done:
            r = results[t.id]
            model = selections[t.id].model if t.id in selections else r.model or "?"
            text = (r.output.text or "").strip() if r.output else ""
            if len(text) > MAX_TEXT:
                text = text[:MAX_TEXT] + "…"
            files = ", ".join(f.id for f in r.output.files) if r.output else ""
            detail = "; ".join(x for x in (text, f"files: {files}" if files else "") if x)
            lines.append(f"- task {t.id} ({t.task}, {model}): {detail or 'done'}")
    rest = [t for t in tasks if t not in done]
    if rest:
        lines.append("")
        lines.append("Not finished:")
        for t in rest:
            r = results.get(t.id)
            why = r.error if r is not None and r.error else "not started"
            lines.append(f"- task {t.id} ({t.task}): {why}")
    return "\n".join(lines)
