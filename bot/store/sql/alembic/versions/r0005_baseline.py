"""Baseline: schema version 5, the last one written as numbered .sql files.

SQLite: revisions 0001-0004 bring a file to version 4; this one adds the deliveries table (the
statements of ``0005_deliveries.sql`` of the earlier releases), unless the file is at version 5
already (see :mod:`bot.store.sql.alembic.legacy`). PostgreSQL: creates version 5 whole (the same
tables, without SQLite's ``WITHOUT ROWID``).

(Until the ``.sql`` chain became revisions 0001-0004, this revision had no parent and did nothing
on SQLite, the chain's own runner having applied version 5 before it; a database that passed it
then is unaffected by the change.)

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

from bot.store.sql.alembic.legacy import sqlite_step

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


SQLITE = """
CREATE TABLE deliveries (
    key TEXT PRIMARY KEY,
    at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX deliveries_at ON deliveries(at);
"""


def _conv() -> sa.Column:
    return sa.Column("conversation_id", sa.Text, sa.ForeignKey("conversations.id", ondelete="CASCADE"),
                     nullable=False)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        sqlite_step(5, SQLITE)
        return
    op.create_table(
        "conversations",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, nullable=False, unique=True),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("platform", sa.Text, nullable=False, server_default=""),
        sa.Column("workspace", sa.Text, nullable=False, server_default=""),
        sa.Column("channel", sa.Text, nullable=False, server_default=""),
        sa.Column("thread", sa.Text, nullable=False, server_default=""),
        sa.Column("updated", sa.Float, nullable=False, server_default="0"),
    )
    op.create_table(
        "turns", _conv(),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("user_text", sa.Text, nullable=False),
        sa.Column("summary", sa.Text, nullable=False, server_default=""),
        sa.Column("user", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("finished", sa.Float),
        sa.Column("owner", sa.Text),
        sa.PrimaryKeyConstraint("conversation_id", "idx"),
    )
    op.create_table(
        "turn_records", _conv(),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("answer", sa.Text, nullable=False, server_default=""),
        sa.Column("record", sa.Text),
        sa.PrimaryKeyConstraint("conversation_id", "idx"),
    )
    op.create_table(
        "resources", _conv(),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("mime", sa.Text, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("origin", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("turn", sa.Integer),
        sa.Column("name", sa.Text),
        sa.Column("tokens", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", "n"),
        sa.UniqueConstraint("conversation_id", "id"),
    )
    op.create_table(
        "owners",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started", sa.Float, nullable=False),
        sa.Column("heartbeat", sa.Float, nullable=False),
    )
    op.create_table(
        "media",
        sa.Column("path", sa.Text, primary_key=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("used", sa.Float, nullable=False),
        sa.Column("owner", sa.Text),
    )
    op.create_table(
        "feedback", _conv(),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("user", sa.Text, nullable=False),
        sa.Column("verdict", sa.Text, sa.CheckConstraint("verdict IN ('good', 'bad')"), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", "idx", "user"),
    )
    op.create_table(
        "deliveries",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_index("conversations_updated", "conversations", ["updated"])
    op.create_index("turns_running", "turns", ["status"], postgresql_where=sa.text("status = 'running'"))
    op.create_index("resources_path", "resources", ["path", "size"])
    op.create_index("media_used", "media", ["used"])
    op.create_index("media_owner", "media", ["owner"], postgresql_where=sa.text("owner IS NOT NULL"))
    op.create_index("deliveries_at", "deliveries", ["at"])


def downgrade() -> None:
    raise NotImplementedError("the baseline is not downgraded")
