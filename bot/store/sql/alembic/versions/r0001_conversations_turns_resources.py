"""Schema version 1: conversations, turns (text, answer, status), resources.

SQLite only (a file at schema version 0 or earlier is brought to 1; see
:mod:`bot.store.sql.alembic.legacy`); nothing on PostgreSQL, where 0005 creates version 5 whole.
The statements are those of ``0001_conversations_turns_resources.sql`` of the earlier releases.

Revision ID: 0001
"""

from bot.store.sql.alembic.legacy import sqlite_step

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SQL = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    created REAL NOT NULL
);

CREATE TABLE turns (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    user_text TEXT NOT NULL,
    answer TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, idx)
);

CREATE TABLE resources (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    path TEXT NOT NULL,
    mime TEXT NOT NULL,
    size INTEGER NOT NULL,
    origin TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    turn INTEGER,
    PRIMARY KEY (conversation_id, id)
);
"""


def upgrade() -> None:
    sqlite_step(1, SQL, None)


def downgrade() -> None:
    raise NotImplementedError("schema versions before 0005 are not downgraded")
