"""Which MCP tools the planner is shown for one request, when the servers list many.

Every tool of a connected server is a task (:mod:`pipeline.mcp_tools`), and each task the planner
may use is a line of its prompt and a name in its plan schema. A server listing thousands of
tools would make the planning prompt larger than any controller takes (the request is refused,
and every run fails). So the MCP tools offered for a request are bounded twice: at most
``max_tools`` of them, and at most ``max_chars`` characters of prompt for them all. When the
servers list more, the tools closest to the request are offered: ranked by the words they share
with it (a word of its task name counts three times a word of its description; words are
compared lower case, without a plural or ``-ed``/``-ing`` ending; ties by name), and the user is
told how many were offered and how many left out. The registry's own tasks are always offered.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Set as AbstractSet
from .config import ToolOffer
from .tasks import TASKS

log = logging.getLogger(__name__)

NAME_WEIGHT = 3
"""A word of a tool's name counts this many times a word of its description."""
_WORD = re.compile(r"[a-z0-9]+")
_ENDINGS = ("ing", "ed", "es", "s")
_STOP = frozenset({"the", "and", "for", "with", "this", "that", "from", "into", "then", "please", "what", "can",
                   "you", "are", "was", "its", "his", "her", "our", "your", "all", "any", "some", "also", "png",
                   "jpg", "jpeg", "wav", "mp3", "mp4"})


@functools.lru_cache(maxsize=16_384)  # tool names and descriptions come back with every request
def stems(text: str) -> frozenset[str]:
    """The words of ``text`` as compared (lower case, 3 letters or more, common words left out,
    a plural or ``-ed``/``-ing`` ending cut)."""
    out = set()
    for word in _WORD.findall(text.lower().replace("_", " ").replace("-", " ")):
        if len(word) < 3 or word in _STOP:
            continue
        for end in _ENDINGS:
            if word.endswith(end) and len(word) - len(end) >= 3:
                word = word[: -len(end)]
                break
        out.add(word)
    return frozenset(out)


def prompt_chars(name: str) -> int:
    """Characters task ``name`` adds to the planning messages: its line in the task list
    (``- name: description; args ...``) and its name in the list of available tasks and in the
    plan schema."""
    spec = TASKS[name]
    line = len(name) + len(spec.description) + sum(len(k) + 3 for k in spec.allowed) + 12
    return line + 2 * (len(name) + 4)


def offered_tools(offer: ToolOffer, available: AbstractSet[str], tools: AbstractSet[str],
                  request_text: str) -> tuple[frozenset[str], list[str]]:
    """The tasks to offer for ``request_text`` (see the module docstring), and the note for
    the user when tools were left out.

    Args:
        offer: the bounds (``[mcp] max_tools`` and ``max_tool_chars``).
        available: the served task names, MCP tools included.
        tools: which of them are MCP tools (registered in :data:`pipeline.tasks.TASKS`).
        request_text: the user's request.

    Returns:
        ``available`` with only the chosen MCP tools; ``[]`` or one sentence.
    """
    tools = sorted(n for n in tools if n in available and n in TASKS)
    cost = {n: prompt_chars(n) for n in tools}
    if len(tools) <= offer.max_tools and sum(cost.values()) <= offer.max_chars:
        return frozenset(available), []
    wanted = stems(request_text)

    def score(name: str) -> int:
        named = stems(name)
        return NAME_WEIGHT * len(wanted & named) + len(wanted & (stems(TASKS[name].description) - named))

    chosen: list[str] = []
    used = 0
    for name in sorted(tools, key=lambda n: (-score(n), n)):
        if len(chosen) == offer.max_tools:
            break
        if used + cost[name] <= offer.max_chars:
            chosen.append(name)
            used += cost[name]
    left = len(tools) - len(chosen)
    log.info("MCP tools: %d of %d offered to the planner (%d characters; [mcp] max_tools = %d, "
             "max_tool_chars = %d)", len(chosen), len(tools), used, offer.max_tools, offer.max_chars)
    note = (f"The MCP servers list {len(tools):,} tools, more than the planner can be shown: the {len(chosen)} "
            f"closest to your request were offered and {left:,} were left out.")
    return frozenset(available).difference(tools) | frozenset(chosen), [note]
