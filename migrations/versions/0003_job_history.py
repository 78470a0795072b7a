"""job lifecycle: job_audit.expired_at/expire_reason, job_history

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job_audit") as batch:
        batch.add_column(sa.Column("expired_at", sa.Float(), nullable=True))
        batch.add_column(sa.Column("expire_reason", sa.Text(), nullable=True))
    op.create_table(
        "job_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("event_id", sa.String(256), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("round_index", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_history"),
        sa.UniqueConstraint("event_id", name="uq_job_history_event_id"),
    )
    op.create_index("ix_job_history_job_id", "job_history", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_job_history_job_id", table_name="job_history")
    op.drop_table("job_history")
    with op.batch_alter_table("job_audit") as batch:
        batch.drop_column("expire_reason")
        batch.drop_column("expired_at")
