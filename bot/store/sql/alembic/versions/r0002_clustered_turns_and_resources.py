"""Schema version 2: conversation key fields and activity time; turns and resources clustered by
conversation; condensed answers and token counts; run records in turn_records; per-kind resource
numbers and file names; indexes for retention, crash marking and media sharing checks.

SQLite only (a file at schema version 1 or earlier is brought to 2; see
:mod:`bot.store.sql.alembic.legacy`); nothing on PostgreSQL, where 0005 creates version 5 whole.
The statements are those of ``0002_clustered_turns_and_resources.sql`` of the earlier releases.

Revision ID: 0002
Revises: 0001
"""

import re
from pathlib import Path

from sqlalchemy import Connection

from bot.store.text import clip_summary
from bot.tokens import count_json_tokens, count_tokens
from pipeline.types import Resource

from bot.store.sql.alembic.legacy import sqlite_step

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SQL = """
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
-- (the revision's _backfill) in the same transaction, right after this file.

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
-- covering index for the media size sum (the store's media_bytes)
CREATE INDEX resources_path ON resources(path, size);
"""

_SEQ = re.compile(r".*?-(\d+)")


def _backfill(conn: Connection) -> None:
    """Split each conversation's key into its fields; condense each turn's answer and count the
    turn's tokens; number each resource within its kind (from its id) and count its tokens."""
    rows = conn.exec_driver_sql("SELECT id, key FROM conversations").all()
    updates = [(*(key.split(":", 3) + ["", "", "", ""])[:4], cid) for cid, key in rows]
    if updates:
        conn.exec_driver_sql("UPDATE conversations SET platform=?, workspace=?, channel=?, thread=? WHERE id=?", updates)
    rows = conn.exec_driver_sql("SELECT t.conversation_id, t.idx, t.user_text, r.answer FROM turns t"
                                " JOIN turn_records r ON r.conversation_id = t.conversation_id AND r.idx = t.idx").all()
    updates = []
    for cid, idx, user_text, answer in rows:
        summary = clip_summary(answer)
        updates.append((summary, count_tokens(user_text) + count_tokens(summary), cid, idx))
    if updates:
        conn.exec_driver_sql("UPDATE turns SET summary=?, tokens=? WHERE conversation_id=? AND idx=?", updates)
    rows = conn.exec_driver_sql("SELECT conversation_id, n, id, kind, mime, size, origin, description, turn"
                                " FROM resources").all()
    updates = []
    for cid, n, rid, kind, mime, size, origin, description, turn in rows:
        m = _SEQ.fullmatch(rid)
        view = Resource(rid, kind, Path(), mime, size, origin, description, turn).prompt_view()
        updates.append((int(m.group(1)) if m else 0, count_json_tokens(view), cid, n))
    if updates:
        conn.exec_driver_sql("UPDATE resources SET seq=?, tokens=? WHERE conversation_id=? AND n=?", updates)



def upgrade() -> None:
    sqlite_step(2, SQL, _backfill)


def downgrade() -> None:
    raise NotImplementedError("schema versions before 0005 are not downgraded")
