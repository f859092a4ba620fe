"""Plans waiting for approval (``[planning] approve``): the plan, the request and who asked, kept
until someone presses Run or Cancel or it expires, so a restart during the wait loses nothing.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_plans",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("requester", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("pending_plans_expires", "pending_plans", ["expires"])


def downgrade() -> None:
    op.drop_index("pending_plans_expires", "pending_plans")
    op.drop_table("pending_plans")
