"""Shared limits, so several processes behave as one bot:

* ``rate_limits``: per user key, the theoretical arrival time of the next request (GCRA);
* ``run_slots``: one row per run in flight per user key, with the owner (process) running it;
  rows of gone owners do not count.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_limits",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("tat", sa.Float, nullable=False),
    )
    op.create_table(
        "run_slots",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_index("run_slots_key", "run_slots", ["key"])


def downgrade() -> None:
    op.drop_table("run_slots")
    op.drop_table("rate_limits")
