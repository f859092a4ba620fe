"""References to another task's output inside a plan's arguments (HuggingGPT §3.3's
``<resource>-N``) and the other forms controllers write for them."""

from __future__ import annotations

import re

REFERENCE_WORDS = ("resource", "generated", "node", "output", "result", "task")
"""Words a controller writes for "the output of task N": the paper's ``<resource>-N``, the
reference implementation's ``<GENERATED>-N``, TaskBench's ``<node-N>``, and the like."""

PLACEHOLDER = re.compile(
    r"<\s*(?:" + "|".join(REFERENCE_WORDS) + r")\s*(?:>\s*[-_]\s*(\d+)>?|[-_ ]\s*(\d+)\s*>)",
    re.IGNORECASE,
)
"""A reference to task N's output: ``<resource>-N``, ``<resource-N>``, ``<GENERATED>-N``,
``<generated-N>``, ``<node-N>``, ``<output_N>``, ``< resource >-N`` ... (case-insensitive). The
task id is :func:`placeholder_id` of a match; validation rewrites every form to ``<resource>-N``. A
match ends at the digits (or at a closing ``>`` right after them): the text after it, spaces and
line breaks included, is never part of it."""

SUSPECT_REFERENCE = re.compile(r"<\s*[A-Za-z_][\w ]{0,30}>\s*-\s*\d+|<\s*[A-Za-z_][\w]{0,30}[-_ ]\d+\s*>")
"""Something shaped like a reference (``<word>-N``, ``<word-N>``) that :data:`PLACEHOLDER` does
not know: a text argument holding one is refused with a repair hint, never run as is."""


def placeholder_id(m: re.Match[str]) -> int:
    """The task id of a :data:`PLACEHOLDER` match."""
    return int(m.group(1) or m.group(2))
