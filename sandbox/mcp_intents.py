"""Keyword planning of MCP tools for the sandbox planner: a tool (task ``mcp.<server>.<tool>``)
is planned when the request names it ("stamp", "count words"), with the arguments its line in the
planning prompt lists (``- NAME: DESCRIPTION; args image, text?``). Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from .planner import Planner
from .wording import clause_end, mask_quotes, quotes

_TOOL_LINE = re.compile(r"^- (mcp\.[a-z0-9][a-z0-9.-]*): .*; args (.*)$", re.M)
_MEDIA = ("image", "audio", "video")


def tool_args(messages: list[Any]) -> dict[str, list[str]]:
    """MCP task name → its argument keys (``"text?"`` when optional), read from the planning
    prompt's task list (the system message)."""
    system = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"), "")
    text = system if isinstance(system, str) else ""
    return {m.group(1): [a.strip() for a in m.group(2).split(",") if a.strip()] for m in _TOOL_LINE.finditer(text)}


def plan_tools(p: Planner, tools: dict[str, list[str]]) -> None:
    """Add the tools the request names, in the order it names them, each taking its files from
    what the clause refers to and its text from a quoted passage (else the request)."""
    masked = mask_quotes(p.text)
    found = []
    for task, keys in tools.items():
        words = task.rsplit(".", 1)[-1].split("-")
        m = re.search(r"\b" + r"[-_ ]".join(re.escape(w) for w in words) + r"(?:s|ed|ing)?\b", masked, re.I)
        if m and task in p.available:
            found.append((m.start(), m.end(), task, keys))
    for start, end, task, keys in sorted(found):
        clause = p.text[start:clause_end(p.text, end)]
        args: dict[str, str] = {}
        deps: list[int] = []
        usable = True
        for key in keys:
            name, optional = key.rstrip("?"), key.endswith("?")
            if name in _MEDIA:
                src = p.source(name, clause) or p.source(name, p.text)
                if src is None:
                    usable = usable and optional
                    continue
                args[name], deps = src[0], deps + src[1]
            elif not optional:
                q = quotes(clause) or quotes(p.text)
                args[name] = q[0][2] if q else p.text.strip()
        if usable:
            p.add(task, args, deps, next((k for k in _MEDIA if k in args), "text"))
