"""Schema version 4: feedback on answers (one verdict per user and turn).

SQLite only (a file at schema version 3 or earlier is brought to 4; see
:mod:`bot.store.sql.alembic.legacy`); nothing on PostgreSQL, where 0005 creates version 5 whole.
The statements are those of ``0004_feedback.sql`` of the earlier releases.

Revision ID: 0004
Revises: 0003
"""

from bot.store.sql.alembic.legacy import sqlite_step

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SQL = """
--
-- * feedback on answers (the Slack feedback buttons): one verdict per user and turn, the latest
--   click wins; removed with its conversation.

CREATE TABLE feedback (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    user TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('good', 'bad')),
    at REAL NOT NULL,
    PRIMARY KEY (conversation_id, idx, user)
) WITHOUT ROWID;
"""


def upgrade() -> None:
    sqlite_step(4, SQL, None)


def downgrade() -> None:
    raise NotImplementedError("schema versions before 0005 are not downgraded")
