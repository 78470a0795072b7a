"""Read the audit rows from any URL the audit store supports (Postgres, SQLite)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session

from venn.audit.db import make_engine, normalize_url
from venn.audit.models import JobAudit, RoundAudit

AUDIT_TABLES = (JobAudit.__tablename__, RoundAudit.__tablename__)


class AuditUnavailable(Exception):
    """No audit database to report on; the message is one line meant for the user."""


@dataclass(frozen=True)
class AuditRows:
    """Every row of job_audit and round_audit (rounds in job, attempt order)."""

    jobs: list[JobAudit]
    rounds: list[RoundAudit]


def display_url(url: str) -> str:
    """The URL with its password hidden."""
    try:
        return make_url(normalize_url(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_audit(url: str) -> AuditRows:
    """All audit rows at `url`. Raises `AuditUnavailable` when the URL is empty or
    malformed, the database cannot be reached (or, for SQLite, does not exist), or it has
    no audit tables."""
    if not url:
        raise AuditUnavailable(
            "no audit database: pass --database-url, set VENN_DATABASE_URL, "
            "or start the stack with `venn up`"
        )
    try:
        parsed = make_url(normalize_url(url))
    except ArgumentError as exc:
        raise AuditUnavailable(f"not a database URL: {url!r}") from exc
    if parsed.get_backend_name() == "sqlite":
        # Connecting would create an empty file: say it is missing instead.
        if not parsed.database or parsed.database == ":memory:":
            raise AuditUnavailable(f"{url}: an in-memory SQLite database has no audit rows")
        if not Path(parsed.database).is_file():
            raise AuditUnavailable(f"no audit database at {parsed.database}")
    shown = display_url(url)
    try:
        engine = make_engine(url)
    except (ArgumentError, ImportError) as exc:
        raise AuditUnavailable(f"cannot open {shown}: {_first_line(exc)}") from exc
    try:
        with engine.connect() as conn:
            present = set(inspect(conn).get_table_names())
            missing = [t for t in AUDIT_TABLES if t not in present]
            if missing:
                raise AuditUnavailable(
                    f"{shown} has no audit tables ({', '.join(missing)} missing): "
                    "is it the database the recorder writes?"
                )
            with Session(bind=conn) as session:
                jobs = list(session.scalars(select(JobAudit).order_by(JobAudit.job_id)))
                rounds = list(
                    session.scalars(
                        select(RoundAudit).order_by(RoundAudit.job_id, RoundAudit.round_index)
                    )
                )
                session.expunge_all()
    except SQLAlchemyError as exc:
        raise AuditUnavailable(f"cannot read {shown}: {_first_line(exc)}") from exc
    finally:
        engine.dispose()
    return AuditRows(jobs=jobs, rounds=rounds)
