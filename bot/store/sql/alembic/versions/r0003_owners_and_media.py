"""Schema version 3: process owners with heartbeat leases, the owner of each running turn, and
the media table (every media file the bot wrote, its size, last use and pinning owner).

SQLite only (a file at schema version 2 or earlier is brought to 3; see
:mod:`bot.store.sql.alembic.legacy`); nothing on PostgreSQL, where 0005 creates version 5 whole.
The statements are those of ``0003_owners_and_media.sql`` of the earlier releases.

Revision ID: 0003
Revises: 0002
"""

from pathlib import Path

from sqlalchemy import Connection

from bot.store.sql.alembic.legacy import sqlite_step

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

SQL = """
--
-- Several processes sharing one data directory (rules in bot/store/lease.py and
-- bot/store/retention.py):
-- * owners: one row per open store (process), with its heartbeat lease;
-- * turns.owner: the owner that began a running turn (NULL for turns from earlier versions,
--   treated as orphans);
-- * media: every media file the bot wrote (conversation files and `hugginggpt run` files), its
--   size, when it was last written or reused, and the owner pinning it while it is written or
--   while its `run` process lives. The media quota counts this table.
--
-- Files already in the media directory that no resource row names (earlier `hugginggpt run`
-- outputs) are recorded by the Python post-step of version 3 (the revision's _backfill).

CREATE TABLE owners (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started REAL NOT NULL,
    heartbeat REAL NOT NULL
) WITHOUT ROWID;

ALTER TABLE turns ADD COLUMN owner TEXT;

CREATE TABLE media (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    used REAL NOT NULL,
    owner TEXT
) WITHOUT ROWID;

INSERT INTO media(path, size, created, used)
SELECT path, max(size), min(created), max(created) FROM resources GROUP BY path;

CREATE INDEX media_used ON media(used);
CREATE INDEX media_owner ON media(owner) WHERE owner IS NOT NULL;
"""

def _backfill(conn: Connection) -> None:
    """Record the media files no resource names (outputs of earlier ``hugginggpt run`` commands),
    with their size and modification time, so the quota counts them."""
    main = next((r[2] for r in conn.exec_driver_sql("PRAGMA database_list").all() if r[1] == "main"), "")
    if not main:  # an in-memory database has no media directory
        return
    data_dir, files = Path(main).parent, []
    for p in (Path(main).parent / "media").rglob("*"):
        if p.name.startswith("."):
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        if p.is_file():
            files.append((str(p.relative_to(data_dir)), st.st_size, st.st_mtime, st.st_mtime))
    if files:
        conn.exec_driver_sql("INSERT OR IGNORE INTO media(path, size, created, used) VALUES (?,?,?,?)", files)



def upgrade() -> None:
    sqlite_step(3, SQL, _backfill)


def downgrade() -> None:
    raise NotImplementedError("schema versions before 0005 are not downgraded")
