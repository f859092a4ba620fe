"""Read-only health probes of the SQLite conversation file, for ``/readyz``
(:mod:`bot.readiness`) and ``hugginggpt doctor``. Each opens its own read-only connection
(``mode=ro``), never the store's, so a probe can neither write nor hold the file's write lock.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def quick_check(path: Path) -> str:
    """``PRAGMA quick_check`` of the SQLite file at ``path`` (the SQLite manual, "quick_check": the
    integrity check without index cross-checks); blocking, run it in a thread.

    Returns:
        ``"ok"``, or what SQLite reported (its error, or up to three problems joined by ``"; "``).
    """
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=2.0)
        rows = conn.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.Error as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if conn is not None:
            conn.close()
    return "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows)


async def count_conversations(path: Path, timeout: float) -> int:
    """The number of conversations in the SQLite file at ``path``, read-only.

    Args:
        timeout: seconds to wait for a lock held by a writer.

    Raises:
        sqlite3.Error (or OSError): the file is not a readable conversation database.
    """
    import aiosqlite

    async with aiosqlite.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout) as conn:
        (count,) = await (await conn.execute("SELECT count(*) FROM conversations")).fetchone()
    return int(count)
