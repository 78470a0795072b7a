"""audit tables: job_audit, round_audit

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_audit",
        sa.Column("job_id", sa.String(200), nullable=False),
        sa.Column("registered_at", sa.Float(), nullable=True),
        sa.Column("demand", sa.Integer(), nullable=True),
        sa.Column("rounds", sa.Integer(), nullable=True),
        sa.Column("deadline_s", sa.Float(), nullable=True),
        sa.Column("workload_s", sa.Float(), nullable=True),
        sa.Column("requirement", sa.JSON(), nullable=True),
        sa.Column("arrival", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("rounds_completed", sa.Integer(), nullable=True),
        sa.Column("jct_s", sa.Float(), nullable=True),
        sa.Column("cancelled_at", sa.Float(), nullable=True),
        sa.Column("cancel_reason", sa.Text(), nullable=True),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_audit"),
    )
    op.create_table(
        "round_audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(200), nullable=False),
        # Attempt number: a failed round and its retry are distinct attempts.
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("demand", sa.Integer(), nullable=False),
        sa.Column("assigned", sa.Integer(), nullable=False),
        sa.Column("results", sa.Integer(), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.Column("closed_at", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("sched_delay_s", sa.Float(), nullable=True),
        sa.Column("response_time_s", sa.Float(), nullable=True),
        sa.Column("event_id", sa.String(200), nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name="pk_round_audit"),
        sa.UniqueConstraint("job_id", "round_index", name="uq_round_audit_job_id_round_index"),
        sa.CheckConstraint("outcome IN ('succeeded', 'failed')", name="ck_round_audit_outcome"),
    )


def downgrade() -> None:
    op.drop_table("round_audit")
    op.drop_table("job_audit")
