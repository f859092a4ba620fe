"""What was run for an earlier turn, as one line of the chat log (HuggingGPT §3.1 plans with the
chat log so that later requests can build on earlier resources).

A follow-up such as "that's not what I meant, use the other photo" corrects the plan of the turn
before it: the planner needs to know which tasks ran, on which files, and what came out or failed,
not only the answer's words. :func:`work_summary` condenses a turn's run record into that line; the
service attaches it to the newest turn of the chat log (:attr:`pipeline.types.Turn.work`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

WORK_CHARS = 700
"""Characters of the whole summary (the chat log's token budget counts the turn's answer only)."""
ARG_CHARS = 60
"""Characters of one argument value."""
RESULT_CHARS = 100
"""Characters of one task's result or error."""


def _clip(value: Any, n: int) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def work_summary(record: Mapping[str, Any]) -> str:
    """One line per task of a run: id, task, arguments, status and a short result.

    Args:
        record: a run record's JSON document (:meth:`pipeline.types.RunRecord.to_json`), as the
            conversation store keeps it.

    Returns:
        ``task 0 image-to-text {"image": "image-1"} ok: a cat on a sofa; task 1 ...``, at most
        :data:`WORK_CHARS` characters; ``""`` when the run had no task (a direct answer) or the
        document has no plan.
    """
    results = record.get("results") or {}
    parts = []
    for task in record.get("tasks") or []:
        if not isinstance(task, Mapping):
            continue
        result = results.get(str(task.get("id"))) or {}
        status = result.get("status") or "not run"
        args = {str(k): _clip(v, ARG_CHARS) for k, v in (task.get("args") or {}).items()}
        line = f"task {task.get('id')} {task.get('task')} {json.dumps(args, ensure_ascii=False)} {status}"
        output = result.get("output") or {}
        produced = output.get("text") or ", ".join(str(f.get("id")) for f in output.get("files") or [])
        detail = produced if status == "ok" else result.get("error")
        if detail:
            line += ": " + _clip(detail, RESULT_CHARS)
        parts.append(line)
    return _clip("; ".join(parts), WORK_CHARS)
