-- Schema version 2. Released: never edit this file; add a new numbered file instead.
--
-- * key fields and last-activity time on conversations;
-- * turns and resources clustered by conversation (WITHOUT ROWID), so one conversation's chat
--   log sits on a few adjacent pages however threads interleave;
-- * condensed answers and token counts precomputed on turns and resources;
-- * run records and full answers moved to turn_records (large, read only for display);
-- * per-kind resource numbers (seq) and file names;
-- * indexes for retention, crash marking and media sharing checks.
--
-- The values SQL cannot compute (key fields split from the key, condensed answers, token counts,
-- per-kind numbers parsed from resource ids) are filled in by the Python post-step of version 2
-- (bot/store/migrations/backfill.py) in the same transaction, right after this file.

ALTER TABLE conversations ADD COLUMN platform TEXT NOT NULL DEFAULT '';
ALTER TABLE conversations ADD COLUMN workspace TEXT NOT NULL DEFAULT '';
ALTER TABLE conversations ADD COLUMN channel TEXT NOT NULL DEFAULT '';
ALTER TABLE conversations ADD COLUMN thread TEXT NOT NULL DEFAULT '';
ALTER TABLE conversations ADD COLUMN updated REAL NOT NULL DEFAULT 0;

CREATE TABLE turns_v2 (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    status TEXT NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    user_text TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    user TEXT,
    error TEXT,
    created REAL NOT NULL,
    finished REAL,
    PRIMARY KEY (conversation_id, idx)
) WITHOUT ROWID;

CREATE TABLE turn_records (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    answer TEXT NOT NULL DEFAULT '',
    record TEXT,
    PRIMARY KEY (conversation_id, idx)
);

CREATE TABLE resources_v2 (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    path TEXT NOT NULL,
    mime TEXT NOT NULL,
    size INTEGER NOT NULL,
    origin TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    turn INTEGER,
    name TEXT,
    tokens INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, n),
    UNIQUE (conversation_id, id)
) WITHOUT ROWID;

-- A conversation was last active when its newest turn started (or when it was created).
UPDATE conversations SET updated = max(
    created, coalesce((SELECT max(t.created) FROM turns t WHERE t.conversation_id = conversations.id), 0)
);

-- Finished turns get their start time as finish time; summary and tokens: the post-step.
INSERT INTO turns_v2(conversation_id, idx, status, user_text, created, finished)
SELECT conversation_id, idx, status, user_text, created, CASE WHEN status = 'running' THEN NULL ELSE created END
FROM turns;

INSERT INTO turn_records(conversation_id, idx, answer)
SELECT conversation_id, idx, answer FROM turns;

-- n numbers a conversation's resources in the order they were stored; seq and tokens: the
-- post-step; resources of a conversation that no longer exists are dropped.
INSERT INTO resources_v2(conversation_id, n, id, kind, seq, path, mime, size, origin, description, turn, created)
SELECT r.conversation_id, row_number() OVER (PARTITION BY r.conversation_id ORDER BY r.rowid), r.id, r.kind, 0,
       r.path, r.mime, r.size, r.origin, r.description, r.turn, c.created
FROM resources r JOIN conversations c ON c.id = r.conversation_id;

DROP TABLE turns;
ALTER TABLE turns_v2 RENAME TO turns;
DROP TABLE resources;
ALTER TABLE resources_v2 RENAME TO resources;

CREATE INDEX conversations_updated ON conversations(updated);
CREATE INDEX turns_running ON turns(status) WHERE status = 'running';
-- covering index for the media size sum (SQLiteStore.media_bytes)
CREATE INDEX resources_path ON resources(path, size);
