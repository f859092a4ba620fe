"""What runs cost, per turn, and the budgets' reservations:

* ``spend``: one row per run charged to a user, a channel and a team (Slack workspace, Discord
  guild): the estimate reserved while it runs (``reserved_usd``), then its actual cost
  (``charged_usd``, the part with known prices; ``actual_usd`` null when a price was unknown).
  A row counts against a budget as ``coalesce(charged_usd, reserved_usd)``.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spend",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("platform", sa.Text, nullable=False),
        sa.Column("user", sa.Text),
        sa.Column("channel", sa.Text),
        sa.Column("team", sa.Text),
        sa.Column("conversation_id", sa.Text),
        sa.Column("turn", sa.Integer),
        sa.Column("reserved_usd", sa.Float, nullable=False),
        sa.Column("estimate_usd", sa.Float),
        sa.Column("actual_usd", sa.Float),
        sa.Column("charged_usd", sa.Float),
    )
    op.create_index("spend_user", "spend", ["user", "at"])
    op.create_index("spend_channel", "spend", ["channel", "at"])
    op.create_index("spend_team", "spend", ["team", "at"])
    op.create_index("spend_at", "spend", ["at"])


def downgrade() -> None:
    op.drop_table("spend")
