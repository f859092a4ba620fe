"""Routing one chat completions request to the stand-in rule of its stage (sandbox and tests).

The pipeline names the stage of every controller call in the ``X-HuggingGPT-Stage`` header, and
the task of a ``controller-task`` call in ``X-HuggingGPT-Task`` (:func:`pipeline.llm.stage_headers`).
The stage's input travels as tagged blocks ``<tag>...</tag>`` in the last (user) message. Nothing
in the prompt text is used for routing. A request that breaks these rules raises
:class:`ProtocolError`, which :mod:`sandbox.controller` answers with HTTP 400.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.llm import STAGE_HEADER, TASK_HEADER

from . import followups, heuristics, replanning
from .phrasings import decline, tool_args
from .wording import SMALL_TALK

STAGES: tuple[str, ...] = ("task-planning", "task-replanning", "model-selection", "response-generation", "controller-task")
"""Stage names accepted in the ``X-HuggingGPT-Stage`` header (HuggingGPT §3 stages plus
``controller-task``, the text tasks the controller serves itself)."""

CONTROLLER_TASKS: tuple[str, ...] = (
    "summarization",
    "translation",
    "conversational",
    "text-generation",
    "text2text-generation",
)
"""Pipeline tags accepted in the ``X-HuggingGPT-Task`` header of a ``controller-task`` request."""


class ProtocolError(ValueError):
    """The request lacks a routing header or a block its stage needs (answered with HTTP 400)."""


def tag(text: str, name: str) -> str | None:
    """The content of ``<name>...</name>`` in ``text`` (may span lines), stripped; ``None`` if absent."""
    m = re.search(rf"<{re.escape(name)}>(.*?)</{re.escape(name)}>", text, re.S)
    return m.group(1).strip() if m else None


def _json_tag(text: str, name: str, kind: type, required: bool = True) -> Any:
    raw = tag(text, name)
    if raw is None:
        if required:
            raise ProtocolError(f"the last user message has no <{name}> block")
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"<{name}> does not hold valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, kind):
        raise ProtocolError(f"<{name}> must hold a JSON {kind.__name__}, got {type(value).__name__}")
    return value


def content_text(message: Any) -> str:
    """Text of a chat message whose ``content`` is a string or a list of ``{"type": "text"}`` parts.

    Raises:
        ProtocolError: ``message`` is not a JSON object.
    """
    if not isinstance(message, dict):
        raise ProtocolError("every message must be a JSON object")
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """Request header ``name`` (aiohttp's lookup is case-insensitive), stripped; ``None`` if absent or empty."""
    value = headers.get(name) if headers is not None else None
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()


def stage_of(headers: Mapping[str, str] | None) -> str | None:
    """The ``X-HuggingGPT-Stage`` header of a request, stripped; ``None`` when absent or empty."""
    return header(headers, STAGE_HEADER)


def answer_for(body: dict[str, Any], headers: Mapping[str, str] | None) -> tuple[str, str]:
    """Compute the stand-in's answer to one chat completions request.

    Args:
        body: the JSON request body (``{"model", "messages", ...}``).
        headers: the request headers; routing uses ``X-HuggingGPT-Stage`` and, for
            ``controller-task``, ``X-HuggingGPT-Task`` (:func:`pipeline.llm.stage_headers`).

    Returns:
        ``(stage, content)``: the stage name and the assistant's text (a JSON document for
        ``task-planning`` and ``model-selection``, prose for the other stages).

    Raises:
        ProtocolError: missing or unknown stage or task header, no last user message, missing or
            malformed blocks.
    """
    stage = stage_of(headers)
    if stage is None:
        raise ProtocolError(f"the {STAGE_HEADER} header is missing; expected one of {', '.join(STAGES)}")
    if stage not in STAGES:
        raise ProtocolError(f"unknown stage {stage!r} in the {STAGE_HEADER} header; expected one of {', '.join(STAGES)}")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ProtocolError("the request has no messages")
    last = msgs[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise ProtocolError("the last message must be the user message with the tagged blocks")
    user = content_text(last)
    return stage, _STAGE_ANSWERS[stage](user, msgs, headers)


def _plan(user: str, msgs: list[Any], headers: Mapping[str, str] | None) -> str:
    """Task planning: the keyword plan as ``{"tasks": [...]}`` (a ``<problem>`` block of a repair
    round gets the same deterministic plan: it is already valid); ``{"tasks": []}`` for small talk.
    When the keywords find no task for anything else, the stand-in declines in prose
    (:func:`sandbox.phrasings.decline`), as a controller does that cannot plan a request."""
    request = tag(user, "request")
    if request is None:
        raise ProtocolError("the last user message has no <request> block")
    resources = _json_tag(user, "resources", list)
    available = _json_tag(user, "available_tasks", list)
    plan = followups.redo_with_other_file(request, resources, tag(user, "chat_log")) or heuristics.plan_tasks(
        request, resources, [str(a) for a in available], tool_args(msgs), first_turn=tag(user, "chat_log") is None)
    if not plan and not SMALL_TALK.search(request):
        return decline(request, [r for r in resources if isinstance(r, dict)])
    return json.dumps({"tasks": plan}, ensure_ascii=False)


def _replan(user: str, msgs: list[Any], headers: Mapping[str, str] | None) -> str:
    """Task replanning: a neighbouring task for each failed one, or answer from what exists; with
    generated images shown, what they are (``"found"``)."""
    plan = _json_tag(user, "plan", list)
    results = _json_tag(user, "results", dict)
    available = _json_tag(user, "available_tasks", list)
    next_id = int(tag(user, "next_id") or 0)
    out: dict[str, Any] = {"tasks": replanning.replan(plan, results, [str(a) for a in available], next_id)}
    found = replanning.seen_images(msgs[-1] if msgs else None)
    if found:  # a vision controller's checking round: say what the images are
        out["found"] = found
    return json.dumps(out)


def _select(user: str, msgs: list[Any], headers: Mapping[str, str] | None) -> str:
    """Model selection: ``{"id", "reason"}`` of one candidate."""
    task = _json_tag(user, "task", dict)
    candidates = _json_tag(user, "candidates", list)
    try:
        pick = heuristics.select_model(task, candidates)
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None
    return json.dumps(pick, ensure_ascii=False)


def _respond(user: str, msgs: list[Any], headers: Mapping[str, str] | None) -> str:
    """Response generation: the templated answer."""
    request = tag(user, "request")
    if request is None:
        raise ProtocolError("the last user message has no <request> block")
    plan = _json_tag(user, "plan", list)
    selections = _json_tag(user, "selections", dict, required=False) or {}
    results = _json_tag(user, "results", dict, required=False) or {}
    return heuristics.compose_response(request, plan, selections, results)


def _controller_task(user: str, msgs: list[Any], headers: Mapping[str, str] | None) -> str:
    """A text task the controller serves itself, named by the ``X-HuggingGPT-Task`` header."""
    task_name = header(headers, TASK_HEADER)
    expected = f"expected one of {', '.join(CONTROLLER_TASKS)}"
    if task_name is None:
        raise ProtocolError(f"a controller-task request needs the {TASK_HEADER} header; {expected}")
    if task_name not in CONTROLLER_TASKS:
        raise ProtocolError(f"unknown controller task {task_name!r} in the {TASK_HEADER} header; {expected}")
    text = tag(user, "input")
    if text is None:
        raise ProtocolError("the last user message has no <input> block")
    return heuristics.controller_task(task_name, text, tag(user, "context"))


_STAGE_ANSWERS: dict[str, Callable[[str, list[Any], Mapping[str, str] | None], str]] = {
    "task-planning": _plan,
    "task-replanning": _replan,
    "model-selection": _select,
    "response-generation": _respond,
    "controller-task": _controller_task,
}
"""Stage name → the function that writes its answer (every name of ``STAGES``)."""
