"""Deliveries remember who took them and, until their turn begins, the event itself:
when the process that took a delivery dies before starting its turn, another process finds the
event here and runs it, so a platform event acknowledged once is never lost.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("owner", sa.Text))
    op.add_column("deliveries", sa.Column("payload", sa.Text))
    op.create_index("deliveries_pending", "deliveries", ["owner"], sqlite_where=sa.text("payload IS NOT NULL"),
                    postgresql_where=sa.text("payload IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("deliveries_pending", "deliveries")
    op.drop_column("deliveries", "payload")
    op.drop_column("deliveries", "owner")
