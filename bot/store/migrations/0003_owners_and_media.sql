-- Schema version 3. Released: never edit this file; add a new numbered file instead.
--
-- Several processes sharing one data directory (issue 14; rules in bot/store/lease.py and
-- bot/store/retention.py):
-- * owners: one row per open store (process), with its heartbeat lease;
-- * turns.owner: the owner that began a running turn (NULL for turns from earlier versions,
--   treated as orphans);
-- * media: every media file the bot wrote (conversation files and `hugginggpt run` files), its
--   size, when it was last written or reused, and the owner pinning it while it is written or
--   while its `run` process lives. The media quota counts this table.
--
-- Files already in the media directory that no resource row names (earlier `hugginggpt run`
-- outputs) are recorded by the Python post-step of version 3 (bot/store/migrations/backfill.py).

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
