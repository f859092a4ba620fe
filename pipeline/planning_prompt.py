"""Task planning's prompt (HuggingGPT §3.1): the specification with the served tasks, the
demonstrations, the chat log (earlier turns, the resources in them and what was run for them),
the request and its resources; and the JSON schema of a plan for structured output.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence, Set as AbstractSet
from typing import Any

from . import prompts
from .tasks import TASKS
from .types import Request, Turn


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
    available), then the chat log, the request, its resources and the available tasks."""
    messages = [{"role": "system", "content": prompts.render("planning.system", tasks=task_lines(available))}]
    for demo in prompts.demonstrations():
        if all(t["task"] in available for t in demo["tasks"]):
            messages.append(
                {
                    "role": "user",
                    "content": prompts.render(
                        "planning.user",
                        history="",
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
                request=request.text,
                resources=json.dumps([r.prompt_view() for r in request.resources], ensure_ascii=False),
                available=json.dumps(sorted(available)),
                problem=problem,
            ),
        }
    )
    return messages
