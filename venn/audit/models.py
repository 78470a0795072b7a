"""Audit tables. The schema is owned by Alembic (migrations/); keep both in step
(tests/database/test_migrations.py compares them)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from venn.fields import EVENT_ID_MAX

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class JobAudit(Base):
    """One row per job, filled in as its lifecycle events arrive (in any order).

    Times are seconds on the pipeline's clock (wall clock, or trace time when emulated).
    """

    __tablename__ = "job_audit"

    job_id: Mapped[str] = mapped_column(String(200), primary_key=True)  # ids: ID_MAX
    registered_at: Mapped[float | None] = mapped_column(Float)
    demand: Mapped[int | None] = mapped_column(Integer)
    rounds: Mapped[int | None] = mapped_column(Integer)
    deadline_s: Mapped[float | None] = mapped_column(Float)
    workload_s: Mapped[float | None] = mapped_column(Float)
    requirement: Mapped[dict[str, float] | None] = mapped_column(JSON)
    arrival: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    rounds_completed: Mapped[int | None] = mapped_column(Integer)
    jct_s: Mapped[float | None] = mapped_column(Float)
    cancelled_at: Mapped[float | None] = mapped_column(Float)
    cancel_reason: Mapped[str | None] = mapped_column(Text)
    expired_at: Mapped[float | None] = mapped_column(Float)
    expire_reason: Mapped[str | None] = mapped_column(Text)
    recorded_at: Mapped[object] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )

    @property
    def status(self) -> str:
        """As venn.core.lifecycle.JobLife.status says it, from the audited columns."""
        if self.finished_at is not None:
            done, asked = self.rounds_completed or 0, self.rounds or 0
            return "failed" if done < asked else "finished"
        if self.cancelled_at is not None:
            return "cancelled"
        if self.expired_at is not None:
            return "expired"
        return "submitted" if self.registered_at is not None else "unknown"


class RoundAudit(Base):
    """One row per closed round attempt.

    `round_index` counts attempts, not successful rounds: a failed round and its retry are
    two attempts with two indexes, so UNIQUE(job_id, round_index) means "each attempt
    closes exactly once" and replayed round_closed events are ignored.
    """

    __tablename__ = "round_audit"
    __table_args__ = (
        UniqueConstraint("job_id", "round_index"),
        CheckConstraint("outcome IN ('succeeded', 'failed')", name="outcome"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(200), nullable=False)
    round_index: Mapped[int] = mapped_column(Integer, nullable=False)
    outcome: Mapped[str] = mapped_column(String(16), nullable=False)
    demand: Mapped[int] = mapped_column(Integer, nullable=False)
    assigned: Mapped[int] = mapped_column(Integer, nullable=False)
    results: Mapped[int] = mapped_column(Integer, nullable=False)
    opened_at: Mapped[float] = mapped_column(Float, nullable=False)
    closed_at: Mapped[float] = mapped_column(Float, nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False, default="")
    sched_delay_s: Mapped[float | None] = mapped_column(Float)
    response_time_s: Mapped[float | None] = mapped_column(Float)
    event_id: Mapped[str] = mapped_column(String(EVENT_ID_MAX), nullable=False)
    recorded_at: Mapped[object] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), nullable=False
    )


class JobHistory(Base):
    """A job's history, one row per event of its life: registered, each round requested and
    closed (with why it failed), heartbeat gaps end in expired, finished or cancelled."""

    __tablename__ = "job_history"
    __table_args__ = (UniqueConstraint("event_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    event_id: Mapped[str] = mapped_column(String(EVENT_ID_MAX), nullable=False)
    time: Mapped[float] = mapped_column(Float, nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    round_index: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(Text, nullable=False, default="")
