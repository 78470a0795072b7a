"""Audit store: job lifecycle and every closed round, in Postgres or SQLite."""

from venn.audit.db import create_database, drop_database, make_engine, normalize_url
from venn.audit.migrate import downgrade_database, upgrade_database
from venn.audit.models import Base, JobAudit, RoundAudit
from venn.audit.writes import (
    job_rows_from_events,
    record_jobs,
    record_rounds,
    round_row,
)

__all__ = [
    "Base",
    "JobAudit",
    "RoundAudit",
    "create_database",
    "downgrade_database",
    "drop_database",
    "job_rows_from_events",
    "make_engine",
    "normalize_url",
    "record_jobs",
    "record_rounds",
    "round_row",
    "upgrade_database",
]
