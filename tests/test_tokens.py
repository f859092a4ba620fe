"""Offline token estimate for the chat-log budget (bot/tokens.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bot.tokens import count_json_tokens, count_tokens

ROOT = Path(__file__).resolve().parent.parent


def test_known_values():
    assert count_tokens("") == 0
    assert count_tokens("astronaut") == 3
    assert count_tokens("a cat") == 2  # the space joins the next word
    assert count_tokens("1234567") == 3  # digit groups of three
    assert count_tokens("猫") == 2 and count_tokens("é") == 1 and count_tokens("🐱") == 3
    assert count_tokens("?!") == 2
    assert count_json_tokens({"id": "image-1"}) == count_tokens('{"id":"image-1"}')


def test_taskbench_requests_cost_more_than_a_word_each():
    for line in (ROOT / "tests/fixtures/taskbench/data_multimedia_requests.jsonl").read_text().splitlines()[:200]:
        text = json.loads(line)["user_request"]
        words = len(text.split())
        assert words <= count_tokens(text) <= len(text.encode("utf-8"))


@given(st.text(max_size=400))
def test_bounds(text):
    n = count_tokens(text)
    assert (n == 0) == (text == "")
    # never fewer than the number of letter/digit runs, never more than UTF-8 bytes
    assert len(re.findall(r"[A-Za-z]+|\d+", text)) <= n <= len(text.encode("utf-8"))


@given(st.text(max_size=200), st.text(min_size=1, max_size=200))
def test_appending_text_never_lowers_the_count_much(a, b):
    # a piece may merge with its neighbour (one token saved at the seam), never more
    assert count_tokens(a + b) >= count_tokens(a) - 1
