"""Deterministic stand-ins for the controller LLM's four jobs (pure functions, no I/O).

The sandbox controller (:mod:`sandbox.controller`) answers every controller call with these
functions so that ``hugginggpt run --sandbox`` and the tests work without credentials. They are a
*labelled* stand-in: a keyword planner (:func:`plan_tasks`, in :mod:`sandbox.planning`), a
word-overlap model picker and a template writer, not a language model. Stage names follow
HuggingGPT (Shen et al., NeurIPS 2023, §3): task planning, model selection, response generation;
plus ``controller-task`` for the text tasks the controller serves itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .planning import plan_tasks
from .wording import SMALL_TALK, first_sentence

__all__ = ["LABEL", "compose_response", "controller_task", "plan_tasks", "select_model"]

LABEL = "*(Sandbox stand-in controller: answers are assembled from stand-in model outputs.)*"
"""First line of every response-generation answer, so nobody mistakes it for a real LLM."""

# ----------------------------------------------------------------------------------------------
# Model selection (paper §3.2)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on and or for with is are be this that it by from as at".split())


def _words(s: str) -> set[str]:
    return {w for w in _WORD.findall(s.lower()) if w not in _STOP and len(w) > 1}


def select_model(task: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, str]:
    """Pick one candidate for ``task`` by word overlap with its description (stand-in for §3.2).

    Args:
        task: ``{"id", "task", "args"}``.
        candidates: ``[{"id", "description"?, "downloads"?, "likes"?, ...}]``, best-ranked first.

    Returns:
        ``{"id": <a candidate id>, "reason": "[sandbox] ..."}``; the first candidate when no
        description shares a word with the task (ties also go to the earlier candidate).

    Raises:
        ValueError: ``candidates`` is empty or has no ids.
    """
    ids = [c for c in candidates if isinstance(c, dict) and c.get("id")]
    if not ids:
        raise ValueError("model-selection needs at least one candidate with an id")
    want = _words(str(task.get("task", "")).replace("-", " "))
    for v in (task.get("args") or {}).values():
        if isinstance(v, str) and not v.startswith("<resource>") and not re.fullmatch(r"[a-z]+-\d+", v):
            want |= _words(v)
    best, best_score, best_common = ids[0], -1, set()
    for c in ids:
        have = _words(f"{c.get('id', '')} {c.get('description', '')} {c.get('task', '')} {c.get('pipeline_tag', '')}")
        common = want & have
        if len(common) > best_score:
            best, best_score, best_common = c, len(common), common
    if best_common:
        reason = f"[sandbox] its description shares the most words with the task ({', '.join(sorted(best_common)[:5])})."
    else:
        reason = "[sandbox] no description matched the task words better, so the top-ranked candidate was kept."
    return {"id": str(best["id"]), "reason": reason}


# ----------------------------------------------------------------------------------------------
# Response generation (paper §3.4)


def _clip(s: str, n: int = 300) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def compose_response(
    request: str, plan: list[dict[str, Any]], selections: dict[str, Any], results: dict[str, Any]
) -> str:
    """Write the answer from the results (stand-in for §3.4 response generation).

    Args:
        request: the user's text.
        plan: tasks ``[{"task", "id", "dep", "args"}]``.
        selections: task id (str or int) to ``{"model", "reason"}``.
        results: task id to ``{"task", "status", "text"?, "files": [{"id","kind","description"}],
            "data"?, "error"?}``.

    Returns:
        Markdown: :data:`LABEL`, a direct answer quoting text outputs, naming generated files and
        failures, then a "How I did it" section (one line per task: task, model, outcome).
    """
    sel = {str(k): v for k, v in (selections or {}).items()}
    res = {str(k): v for k, v in (results or {}).items()}
    plan = sorted(plan or [], key=lambda t: (not isinstance(t.get("id"), int), t.get("id") if isinstance(t.get("id"), int) else 0))
    lines = [LABEL, ""]
    if not plan:
        lines.append(_direct_answer(request))
        return "\n".join(lines)
    answer: list[str] = []
    failed: list[str] = []
    for t in plan:
        _outcome_lines(t.get("task", "task"), res.get(str(t.get("id"))) or {}, answer, failed)
    lines.append(f"Here is what I found for “{_clip(request, 120)}”:")
    lines.extend(answer or ["- No task produced an output."])
    if failed:
        lines.append("")
        lines.append("What did not work:")
        lines.extend(failed)
    lines += ["", "**How I did it**", ""]  # a list that starts at 1 after a blank line, as Markdown renders it
    lines.extend(f"{n}. {_how_line(t, sel.get(str(t.get('id'))) or {}, res.get(str(t.get('id'))) or {})}"
                 for n, t in enumerate(plan, 1))
    return "\n".join(lines)


def _outcome_lines(name: str, r: dict[str, Any], answer: list[str], failed: list[str]) -> None:
    """Add task ``name``'s result ``r`` to ``answer`` (what it produced) or ``failed``."""
    status = r.get("status", "missing")
    if status == "ok":
        if r.get("text"):
            answer.append(f"- **{name}**: “{_clip(r['text'])}”")
        files = r.get("files") or []
        if files:
            named = ", ".join(f"`{f.get('id')}` ({f.get('kind', 'file')})" for f in files)
            answer.append(f"- **{name}** produced {named}, delivered with this answer.")
        if not r.get("text") and not files:
            data = r.get("data")
            answer.append(f"- **{name}**: {_clip(json.dumps(data)) if data else 'finished with no output.'}")
    elif status == "skipped":
        failed.append(f"- **{name}** was skipped: {r.get('error') or 'a task it needed did not finish.'}")
    else:
        failed.append(f"- **{name}** failed: {r.get('error') or 'no result came back.'}")


def _how_line(t: dict[str, Any], s: dict[str, Any], r: dict[str, Any]) -> str:
    """One "How I did it" line: task id, task, model, the tasks it waited for, outcome."""
    deps = [d for d in t.get("dep", []) if d != -1]
    after = f" after task {', '.join(map(str, deps))}" if deps else ""
    return f"Task {t.get('id')}, `{t.get('task')}` with `{s.get('model', 'no model')}`{after}: {r.get('status', 'no result')}."


def _direct_answer(request: str) -> str:
    req = request.strip()
    if SMALL_TALK.search(req):
        if re.search(r"\bthank", req, re.I):
            return "You're welcome!"
        if re.search(r"what can you do|help|who are you", req, re.I):
            return (
                "Hello! I plan your request as AI tasks (captioning, object detection, image generation, "
                "speech recognition, text to speech and more), run Hugging Face models for them and "
                "summarise the results. Send a request, with a picture or a recording if you like."
            )
        return "Hello! How can I help you today? You can send a picture, a recording or a request."
    if re.search(r"\bvideo\b", req, re.I) and re.search(r"transcri|speech|said|say|sound|audio", req, re.I):
        return (
            f"You asked: “{_clip(req, 200)}”. There is no sound to work on here, so nothing was run: send "
            "the video itself (its sound track is read from it) or the recording as a file."
        )
    return (
        f"You asked: “{_clip(req, 200)}”. No model task was needed for this, and the sandbox stand-in "
        "cannot answer general questions itself; a real controller model would answer here."
    )


# ----------------------------------------------------------------------------------------------
# Text tasks the controller serves itself


def controller_task(task: str, text: str, context: str | None = None) -> str:
    """Do a controller-served text task with simple rules; the result is labelled ``[sandbox]``.

    Args:
        task: ``summarization | translation | conversational | text-generation |
            text2text-generation``.
        text: the input text.
        context: optional extra text (ignored by most tasks).

    Returns:
        Summary: the first sentence, shortened; translation: ``"[sandbox translation] " + text``;
        generation: the text and a short continuation; conversational: an acknowledgement.

    Raises:
        ValueError: unknown ``task``.
    """
    text = str(text or "").strip()
    if task == "summarization":
        return f"[sandbox] {first_sentence(text, 160)}"
    if task == "translation":
        return f"[sandbox translation] {text}"
    if task == "text-generation":
        return f"[sandbox] {text} … and the story went on from there."
    if task == "text2text-generation":
        return f"[sandbox] {first_sentence(text, 300)}"
    if task == "conversational":
        return f"[sandbox] You said: “{_clip(text, 200)}”. Thanks for the message!"
    raise ValueError(f"unknown controller task {task!r}")
