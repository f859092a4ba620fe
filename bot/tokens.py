"""Offline token counting for the chat-log budget (``[storage] context_tokens``), and which earlier
turns fit that budget (:func:`select_history`: the rule for the stored chat log and for the one an
HTTP client keeps itself).

HuggingGPT's task planning sees the chat history so the planner can trace resources mentioned
earlier (Shen et al., NeurIPS 2023, §3.1); the controller's context window is finite, so the
history is cut to ``[storage] context_tokens``, newest turns first.

``tiktoken`` downloads its encodings at run time and fails offline, and the controller may be any
OpenAI-compatible model (GPT-4o, Llama, Qwen, ...) whose tokenizer we do not ship. So the budget is
kept with a *conservative estimate*: :func:`count_tokens` splits text the way byte-pair-encoding
pre-tokenizers do (GPT-2/cl100k style: words with their leading space, digit groups, punctuation
runs, whitespace) and charges each piece an upper bound of what such tokenizers spend on it:

* a run of ASCII letters: 1 token per started 4 letters (``"astronaut"`` → 3);
* digits: 1 token per started group of 3 (cl100k/o200k split numbers that way);
* ASCII punctuation/symbols: 1 token per character;
* whitespace not attached to a word: 1 token per started 4 characters;
* any other character (accented letters, CJK, emoji): 1 token per UTF-8 byte after the first
  (``"é"`` → 1, ``"猫"`` → 2, ``"🐱"`` → 3), at least 1.

Measured against the real cl100k_base and o200k_base encodings (files shipped inside the
``litellm`` wheel, used once offline to calibrate, not a dependency) on every request of
``tests/fixtures/taskbench`` (400 texts) plus French/Chinese/emoji/code/number samples: the
estimate was never below the true count and over-counted by about 1.5x in total. Tokenizers with a
much smaller vocabulary (Llama-2's 32k) may spend more than this on some texts; keep headroom.
Over-counting only means a slightly shorter chat log in the prompt; under-counting could overflow
the controller's context window.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.types import Resource, Turn

_PIECE = re.compile(r"[A-Za-z]+|\d+|[!-/:-@\[-`{-~]+|\s+|[^\x00-\x7f]")


def count_tokens(text: str) -> int:
    """Return a conservative (upper-bound) token count for ``text``.

    Args:
        text: any string (may be empty).

    Returns:
        int >= 0: estimated number of tokens; 0 only for the empty string.
    """
    total = 0
    pos = 0
    n = len(text)
    while pos < n:
        m = _PIECE.match(text, pos)
        if m is None:  # ASCII control characters: one token each
            total += 1
            pos += 1
            continue
        piece = m.group()
        c = piece[0]
        if c.isascii() and c.isalpha():
            total += (len(piece) + 3) // 4
        elif c.isascii() and c.isdigit():
            total += (len(piece) + 2) // 3
        elif c.isspace() and c.isascii():
            total += (len(piece) + 3) // 4
            # a single space before a word is merged into the word's token by BPE tokenizers
            if piece == " " and m.end() < n and text[m.end()].isascii() and text[m.end()].isalpha():
                total -= 1
        elif not c.isascii():
            total += max(1, len(c.encode("utf-8", "surrogatepass")) - 1)
        else:
            total += len(piece)
        pos = m.end()
    return total


def count_json_tokens(value: Any) -> int:
    """Conservative token count of ``value`` rendered as compact JSON (dicts, lists, scalars).

    Args:
        value: a JSON-able value (e.g. :meth:`pipeline.types.Resource.prompt_view`).

    Returns:
        int >= 0: estimated tokens of ``json.dumps(value, ensure_ascii=False)``.
    """
    return count_tokens(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


TURN_OVERHEAD_TOKENS = 8
"""Tokens charged per turn in the chat log for its framing (role labels, separators)."""

TurnRow = tuple[int, str, str, str, int]
"""``(index, user text, condensed answer, status, tokens of text + condensed answer)``."""


def select_history(
    turns: Iterable[TurnRow], resources: Sequence[tuple[Resource, int]], budget_tokens: int
) -> list[Turn]:
    """The newest finished turns whose cost fits ``budget_tokens`` together.

    A turn costs its stored token count (:func:`bot.tokens.count_tokens` of the user text and
    condensed answer), plus the stored token counts of its resources' prompt views, plus
    :data:`TURN_OVERHEAD_TOKENS`.

    Args:
        turns: finished turns (status ok/error/failed), newest first.
        resources: the conversation's resources with their token counts, oldest first.
        budget_tokens: the budget (``[storage] context_tokens``), tokens.

    Returns:
        :class:`Turn` objects newest first, each with its resources; the list stops at the first
        turn that no longer fits (so the kept turns are always the newest, contiguous).
    """
    fill = HistoryFill(resources, budget_tokens)
    fill.take(turns)
    return fill.history


class HistoryFill:
    """:func:`select_history` fed in pages, newest first, for a reader that fetches turns only
    until the budget is full (:meth:`bot.store.sql.store.SQLStore.context`).

    Args:
        resources: the conversation's resources with their token counts, oldest first.
        budget_tokens: the budget (``[storage] context_tokens``), tokens.

    Attributes:
        history: the turns kept so far, newest first; full: whether a turn did not fit (then
            no older turn is taken).
    """

    def __init__(self, resources: Sequence[tuple[Resource, int]], budget_tokens: int) -> None:
        self.by_turn: dict[int | None, list[Resource]] = {}
        self.cost_of_files: dict[int | None, int] = {}
        for r, tokens in resources:
            self.by_turn.setdefault(r.turn, []).append(r)
            self.cost_of_files[r.turn] = self.cost_of_files.get(r.turn, 0) + tokens
        self.left = budget_tokens
        self.history: list[Turn] = []
        self.full = budget_tokens < TURN_OVERHEAD_TOKENS  # no turn costs less

    def room(self) -> int:
        """How many more turns could fit at most (each costs :data:`TURN_OVERHEAD_TOKENS` or more)."""
        return 0 if self.full else self.left // TURN_OVERHEAD_TOKENS

    def take(self, turns: Iterable[TurnRow]) -> bool:
        """Keep the next ``turns`` (newest first, older than those taken) while they fit.

        Returns:
            Whether older turns could still fit (``False`` once one did not).
        """
        for idx, user_text, summary, status, tokens in turns:
            if self.full:
                break
            cost = tokens + self.cost_of_files.get(idx, 0) + TURN_OVERHEAD_TOKENS
            if cost > self.left:
                self.full = True
                break
            self.left -= cost
            self.history.append(Turn(idx, user_text, summary, tuple(self.by_turn.get(idx, ())), status))
        return not self.full
