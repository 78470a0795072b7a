"""round_audit.event_id holds any event id the events allow (venn.fields.EVENT_ID_MAX)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("round_audit") as batch:
        batch.alter_column(
            "event_id", existing_type=sa.String(200), type_=sa.String(256), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("round_audit") as batch:
        batch.alter_column(
            "event_id", existing_type=sa.String(256), type_=sa.String(200), existing_nullable=False
        )
