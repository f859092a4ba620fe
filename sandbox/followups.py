"""The sandbox planner's reading of a correcting follow-up: "that's not what I meant, use the other
photo" repeats the previous turn's tasks on the conversation's other file of that kind.

It reads the chat log's ``tasks run`` line (:func:`pipeline.followup.work_summary`), which the
product puts in the planning prompt for the newest earlier turn; without that line it cannot know
which file the previous plan used, and it leaves the request to the keyword planner. Pure; a
labelled stand-in like the rest of :mod:`sandbox`.
"""

from __future__ import annotations

import json
import re
from typing import Any

OTHER_FILE = re.compile(r"\b(?:the\s+)?other\s+(?:photo|image|picture|pic|one|file|recording|audio|clip|video)\b", re.I)
"""A request that asks for the other file than the one used before."""
WORK_LINE = re.compile(r"^\[turn \d+\] tasks run: (.*)$", re.M)
WORK_TASK = re.compile(r"task (\d+) ([a-z0-9-]+) (\{.*?\}) (?:ok|failed|skipped|not run)")
PLACEHOLDER = re.compile(r"<resource>-(\d+)")


def redo_with_other_file(request: str, resources: list[dict[str, Any]], chat_log: str | None) -> list[dict[str, Any]] | None:
    """The previous turn's plan again, with each file it used swapped for another file of the same
    kind; ``None`` when the request does not ask for "the other" file, the chat log has no
    ``tasks run`` line, or there is no other file of that kind.

    Args:
        request: the user's words.
        resources: the conversation's resources (prompt views: ``id``, ``kind``, ``origin``).
        chat_log: the ``<chat_log>`` block of the planning prompt, newest turn first.
    """
    if not chat_log or not OTHER_FILE.search(request):
        return None
    line = WORK_LINE.search(chat_log)
    if line is None:
        return None
    previous = []
    for m in WORK_TASK.finditer(line.group(1)):
        try:
            previous.append((int(m.group(1)), m.group(2), json.loads(m.group(3))))
        except ValueError:
            continue
    kind_of = {str(r.get("id")): str(r.get("kind")) for r in resources}
    used = {v for _, _, args in previous for v in args.values() if v in kind_of}
    swap = {}
    for rid in sorted(used):
        others = [r for r in kind_of if kind_of[r] == kind_of[rid] and r not in used]
        if not others:
            return None
        swap[rid] = others[0]
    if not swap:
        return None
    plan = []
    for tid, task, args in previous:
        new_args = {k: swap.get(v, v) for k, v in args.items()}
        deps = sorted({int(n) for v in new_args.values() for n in PLACEHOLDER.findall(str(v))})
        plan.append({"task": task, "id": tid, "dep": deps or [-1], "args": new_args})
    return plan
