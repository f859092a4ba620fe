"""Python post-steps of migrations: values a ``.sql`` file cannot compute.

A post-step runs right after its version's ``.sql`` file, inside the same transaction (so a
failure rolls back the whole version). Each one is keyed by the version it completes in
:data:`POST_STEPS` and must be a no-op on empty tables (a new database runs every migration).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiosqlite

from pipeline.types import Resource

from ...tokens import count_json_tokens, count_tokens
from ..text import clip_summary

PostStep = Callable[[aiosqlite.Connection], Awaitable[None]]

_SEQ = re.compile(r".*?-(\d+)")


def resource_seq(resource_id: str) -> int:
    """The per-kind number of a resource id (``"image-12"`` -> 12); 0 if it has none."""
    m = _SEQ.fullmatch(resource_id)
    return int(m.group(1)) if m else 0


def key_fields(key: str) -> tuple[str, str, str, str]:
    """``(platform, workspace, channel, thread)`` of a version-1 key string
    (``"platform:workspace:channel:thread"``, the thread may contain ``:``; missing parts ``""``)."""
    parts = (key.split(":", 3) + ["", "", "", ""])[:4]
    return parts[0], parts[1], parts[2], parts[3]


async def backfill_v2(db: aiosqlite.Connection) -> None:
    """Version 2: split the key of each conversation into its fields; condense each turn's answer
    (:func:`bot.store.text.clip_summary`) and count the turn's tokens (user text + condensed
    answer, :func:`bot.tokens.count_tokens`); number each resource within its kind (parsed from
    its id) and count the tokens of its prompt view (:func:`bot.tokens.count_json_tokens`)."""
    rows = await db.execute_fetchall("SELECT id, key FROM conversations")
    await db.executemany(
        "UPDATE conversations SET platform=?, workspace=?, channel=?, thread=? WHERE id=?",
        [(*key_fields(key), cid) for cid, key in rows],
    )
    rows = await db.execute_fetchall(
        "SELECT t.conversation_id, t.idx, t.user_text, r.answer FROM turns t"
        " JOIN turn_records r ON r.conversation_id = t.conversation_id AND r.idx = t.idx"
    )
    updates = []
    for cid, idx, user_text, answer in rows:
        summary = clip_summary(answer)
        updates.append((summary, count_tokens(user_text) + count_tokens(summary), cid, idx))
    await db.executemany("UPDATE turns SET summary=?, tokens=? WHERE conversation_id=? AND idx=?", updates)
    rows = await db.execute_fetchall(
        "SELECT conversation_id, n, id, kind, mime, size, origin, description, turn FROM resources"
    )
    updates = []
    for cid, n, rid, kind, mime, size, origin, description, turn in rows:
        view = Resource(rid, kind, Path(), mime, size, origin, description, turn).prompt_view()
        updates.append((resource_seq(rid), count_json_tokens(view), cid, n))
    await db.executemany("UPDATE resources SET seq=?, tokens=? WHERE conversation_id=? AND n=?", updates)


def _media_files(data_dir: Path) -> list[tuple[str, int, float]]:
    """``(path relative to data_dir, size, mtime)`` of the finished files under ``data_dir/media``
    (temporary ``.*`` files of interrupted writes are left out)."""
    out = []
    for p in (data_dir / "media").rglob("*"):
        if p.name.startswith("."):
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        if p.is_file():
            out.append((str(p.relative_to(data_dir)), st.st_size, st.st_mtime))
    return out


async def backfill_v3(db: aiosqlite.Connection) -> None:
    """Version 3: record the media files no resource names (outputs of earlier ``hugginggpt
    run`` commands), with their size and modification time, so the quota counts them."""
    rows = await db.execute_fetchall("PRAGMA database_list")
    main = next((r[2] for r in rows if r[1] == "main"), "")
    if not main:  # an in-memory database has no media directory
        return
    files = await asyncio.to_thread(_media_files, Path(main).parent)
    await db.executemany(
        "INSERT OR IGNORE INTO media(path, size, created, used) VALUES (?,?,?,?)",
        [(path, size, mtime, mtime) for path, size, mtime in files],
    )


POST_STEPS: dict[int, PostStep] = {2: backfill_v2, 3: backfill_v3}
"""Schema version -> its post-step."""
