"""Expert servers registered by ``hugginggpt experts launch`` (a server it started on Hugging Face
Jobs): its base URL, the API key the bot sends it, the job running it and when the record expires
(the launch's deadline, epoch seconds), so every bot process sharing the store routes to it without
a restart, and forgets it when the launch removes the record or the record expires.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "expert_servers",
        sa.Column("url", sa.Text, primary_key=True),
        sa.Column("api_key", sa.Text, nullable=False),
        sa.Column("job", sa.Text, nullable=False),
        sa.Column("registered", sa.Float, nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )
    op.create_index("expert_servers_expires", "expert_servers", ["expires"])


def downgrade() -> None:
    op.drop_index("expert_servers_expires", "expert_servers")
    op.drop_table("expert_servers")
