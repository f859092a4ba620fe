"""The SQLite conversation file's name, and read-only health probes of it for ``/readyz``
(:mod:`bot.readiness`) and ``hugginggpt doctor``. Each probe opens its own read-only connection
(``mode=ro``), never the store's, so it can neither write nor hold the file's write lock. This
module imports no SQLAlchemy: the doctor's checks run side by side within one deadline.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

DB_NAME = "conversations.sqlite3"
"""The SQLite file of the store, in the data directory."""


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
