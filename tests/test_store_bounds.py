"""Bounded conversation reads: the chat log (``context()``) reads only the turns its token budget
can hold, however long the conversation, and ``prune`` with nothing to delete reads no
conversation, turn or resource row (indexed ranges and the media sizes only).

The bounds are measured, not timed: the Python memory a ``context()`` call allocates (on both
databases: the rows it fetches become Python strings), and on SQLite the virtual-machine steps
the database runs for the call (SQLite's progress handler, installed through SQLAlchemy's pool
``connect`` event on every connection the store opens).
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from bot.incoming import ConversationKey
from bot.store.sql.resource_cache import ResourceCache
from bot.tokens import count_json_tokens, count_tokens, select_history
from pipeline.types import Resource, RunRecord
from tests.test_store import KEY_A, KEY_B, media, on_writer, q
from tests.test_store import sqlite_store, store  # noqa: F401  (fixtures)

BIG_TEXT = "Describe every object in this picture, in detail, with its colour and position. " * 625  # 50 KB


async def add_turn(s, cid: str, text: str, answer: str = "Done.") -> int:
    turn = await s.begin_turn(cid, text, "U1")
    await s.finish_turn(cid, turn, RunRecord(text, response=answer))
    return turn


async def peak_bytes_of(coro: Any) -> tuple[Any, int]:
    """The result of awaiting ``coro`` and the peak of the Python memory allocated meanwhile
    (every thread: the SQLite reader's rows too)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = await coro
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


async def test_context_of_a_long_conversation_reads_only_what_the_budget_holds(store):
    """100 old turns of 50 KB each (5 MB) under 5 short new ones: with a 1,500-token budget the
    chat log is the 5 new turns, and loading it allocates a small fraction of the old turns'
    bytes (reading every turn, as the store once did, allocates all of them)."""
    cid = await store.get_or_create(KEY_A)
    for _ in range(100):
        await add_turn(store, cid, BIG_TEXT)
    for i in range(5):
        await add_turn(store, cid, f"now make picture {i} brighter", f"Here is picture {i}, brighter.")
    (history, _), peak = await peak_bytes_of(store.context(cid, 1500))
    assert [t.index for t in history] == [104, 103, 102, 101, 100]
    assert peak < 2_000_000, f"context() allocated {peak:,} bytes for a 5-turn chat log"
    everything, _ = await store.context(cid, 10_000_000)  # a budget that holds them all
    assert len(everything) == 105


async def test_context_in_pages_keeps_the_rule_of_one_read(store):
    """Turns read page by page (16, then 64...) give exactly :func:`select_history` over every
    turn at once, for budgets ending inside the first page, inside the second, and past the end."""
    cid = await store.get_or_create(KEY_B)
    for i in range(40):
        turn = await store.begin_turn(cid, f"request number {i} " + "word " * (i % 7), "U1")
        if i % 9 == 0:
            await store.add_resource(cid, turn, media("chelsea.png"), kind="image", mime="image/png", origin="user",
                                     description=f"photo {i}", name=f"p{i}.png")
        await store.finish_turn(cid, turn, RunRecord("x", response=f"answer {i} " + "more " * (i % 5)))
    rows = [(t["index"], t["user_text"], t["summary"], t["status"],
             count_tokens(t["user_text"]) + count_tokens(t["summary"])) for t in reversed(await store.turns(cid))]
    resources = [(r, count_json_tokens(r.prompt_view())) for r in await store.resources(cid)]
    for budget in (0, 7, 8, 100, 400, 900, 1400, 2500, 100_000):
        history, all_resources = await store.context(cid, budget)
        assert history == select_history(rows, resources, budget), budget
        assert all_resources == [r for r, _ in resources]
    assert len((await store.context(cid, 100_000))[0]) == 40


@contextmanager
def sqlite_steps() -> Iterator[list[int]]:
    """Count the SQLite virtual-machine steps (in thousands) of every connection opened inside:
    ``counter[0]``, reset by the caller before what it measures."""
    counter = [0]

    def tick() -> int:
        counter[0] += 1
        return 0  # 0: go on

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if hasattr(dbapi_connection, "set_progress_handler"):
            dbapi_connection.set_progress_handler(tick, 1000)

    event.listen(Engine, "connect", on_connect)
    try:
        yield counter
    finally:
        event.remove(Engine, "connect", on_connect)


async def fill(s, conversations: int, turns: int) -> None:
    """``conversations`` conversations of ``turns`` finished turns, each turn with a resource
    naming one shared media file (recorded once), idle for a day; written in one statement each."""
    day_ago = time.time() - 86400
    await on_writer(s, f"""INSERT INTO conversations(id, key, created, updated)
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {conversations})
        SELECT printf('c%09d', i), printf('k%d', i), {day_ago}, {day_ago} FROM n""")
    await on_writer(s, f"""INSERT INTO turns(conversation_id, idx, status, tokens, user_text, summary, created, finished)
        WITH RECURSIVE t(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM t WHERE j + 1 < {turns})
        SELECT c.id, j, 'ok', 12, 'make the cat in image-1 wear a hat, please', 'Here it is.', {day_ago}, {day_ago}
        FROM conversations c, t""")
    await on_writer(s, f"""INSERT INTO resources(conversation_id, n, id, kind, seq, path, mime, size, origin, turn,
                                                 tokens, created)
        SELECT conversation_id, idx + 1, 'image-' || (idx + 1), 'image', idx + 1, 'media/shared.png', 'image/png', 1000,
               'user', idx, 20, {day_ago} FROM turns""")
    await on_writer(s, f"INSERT INTO media(path, size, created, used) VALUES ('media/shared.png', 1000, {day_ago}, {day_ago})")


@pytest.mark.parametrize("conversations", [5, 2000])
async def test_prune_with_nothing_to_do_reads_no_conversation_rows(sqlite_store, conversations):
    """A prune that deletes nothing (ages under the limit, media under the quota) runs as many
    SQLite steps over 2,000 conversations (40,000 turns and resources) as over 5: it reads no
    conversation, turn or resource row. (A whole snapshot, as before, takes a step per row.)"""
    s = sqlite_store
    await fill(s, conversations, 20)
    with sqlite_steps() as steps:
        await q(s, "SELECT 1")  # a fresh read connection is counted from here; the writer's already open
        await s.close()
        await s.open()
        steps[0] = 0
        for age, quota in ((30.0, None), (None, 10**9), (30.0, 10**9)):
            report = await s.prune(max_age_days=age, max_media_bytes=quota)
            assert (report.conversations, report.files, report.media_bytes) == (0, 0, 1000)
        used = steps[0]
    assert (await q(s, "SELECT count(*) FROM conversations")) == [(conversations,)]
    assert used < 20, f"{used} thousand SQLite steps for a prune with nothing to do over {conversations} conversations"


@pytest.mark.parametrize("turns", [80, 320, 1280])
async def test_context_steps_do_not_grow_with_the_conversation(sqlite_store, turns):
    """The chat log of a 1,280-turn conversation costs SQLite as many steps as an 80-turn one's
    when the budget holds 39 turns (resources aside: these turns have none); reading every turn,
    as the store once did, takes 3 times the bound at 320 turns and 12 times at 1,280."""
    s = sqlite_store
    cid = await s.get_or_create(ConversationKey("discord", "g", "c", f"t{turns}"))
    await on_writer(s, f"""INSERT INTO turns(conversation_id, idx, status, tokens, user_text, summary, created, finished)
        WITH RECURSIVE t(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM t WHERE j + 1 < {turns})
        SELECT '{cid}', j, 'ok', 30, 'make the cat in image-1 wear a hat, please ' || j, 'Here it is.', 1, 2 FROM t""")
    with sqlite_steps() as steps:
        await s.close()
        await s.open()
        await s.context(cid, 1500)  # connections opened and warm
        steps[0] = 0
        for _ in range(10):
            history, _ = await s.context(cid, 1500)
        used = steps[0]
    assert [t.index for t in history][:2] == [turns - 1, turns - 2]
    assert len(history) == min(turns, 1500 // (30 + 8))
    assert used < 15, f"{used} thousand SQLite steps for 10 chat logs of a {turns}-turn conversation"


async def test_kept_resources_follow_other_processes(new_store):
    """A process keeps the resources of the chat logs it loaded and then reads only newer ones:
    a file another process adds to the conversation is in the next chat log, and a conversation
    another process forgot has none."""
    a, b = new_store(), new_store()
    await a.open()
    await b.open()
    try:
        cid = await a.get_or_create(KEY_A)
        turn = await add_turn(a, cid, "here is a photo")
        await a.add_resource(cid, turn, media("chelsea.png"), kind="image", mime="image/png", origin="user",
                             description="a cat", name="chelsea.png")
        assert [r.id for r in (await a.context(cid, 1500))[1]] == ["image-1"]
        turn = await b.begin_turn(cid, "draw on it", "U1")
        await b.add_resource(cid, turn, media("rocket.jpg"), kind="image", mime="image/jpeg", origin="task:0",
                             description="a rocket", name=None)
        await b.finish_turn(cid, turn, RunRecord("draw on it", response="Drawn."))
        history, resources = await a.context(cid, 1500)
        assert [r.id for r in resources] == ["image-1", "image-2"]
        assert [(t.index, [r.id for r in t.resources]) for t in history] == [(1, ["image-2"]), (0, ["image-1"])]
        assert await b.forget(cid)
        assert await a.context(cid, 1500) == ([], [])
    finally:
        await a.close()
        await b.close()


def test_kept_resources_are_bounded_in_number():
    """A process keeps at most ``most`` resources (least recently loaded conversations dropped
    first) and never a conversation with more: they are read whole again."""
    def rows(n: int, start: int = 1) -> list[tuple]:
        return [(f"image-{i}", "image", f"media/{i}.png", "image/png", 10, "user", "", i, None, 20, i)
                for i in range(start, start + n)]

    def build(row) -> Resource:
        return Resource(*row[:4], int(row[4]), *row[5:9])

    cache = ResourceCache(build, size=3, most=10)
    assert [r.id for r, _ in cache.update("a", 0, rows(6))] == [f"image-{i}" for i in range(1, 7)]
    assert cache.since("a") == 6
    assert len(cache.update("a", 6, rows(2, start=6))) == 7  # row 6 again, then the new one
    assert len(cache.update("b", 0, rows(3))) == 3
    assert (cache.since("a"), cache.since("b")) == (7, 3)
    cache.update("c", 0, rows(4))  # 7 + 3 + 4 > 10: the least recently loaded ("a") goes
    assert (cache.since("a"), cache.since("b"), cache.since("c")) == (0, 3, 4)
    assert len(cache.update("d", 0, rows(11))) == 11 and cache.since("d") == 0  # too many to keep
    assert cache.update("b", 3, []) is None and cache.since("b") == 0  # deleted meanwhile
