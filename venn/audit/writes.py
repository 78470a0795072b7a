"""Idempotent, batched audit writes (at-least-once input: replays must be no-ops).

One INSERT ... ON CONFLICT statement per chunk, in the dialect's own syntax
(Postgres and SQLite both support it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Insert, Table, func, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite

from venn.audit.models import JobAudit, JobHistory, RoundAudit
from venn.events import (
    Event,
    JobAdmission,
    JobCancelled,
    JobExpired,
    JobFinished,
    JobRegistered,
    RoundClosed,
    RoundRequested,
)

CHUNK = 500
ROUNDS: Table = RoundAudit.__table__  # type: ignore[assignment]
JOBS: Table = JobAudit.__table__  # type: ignore[assignment]
HISTORY: Table = JobHistory.__table__  # type: ignore[assignment]
_JOB_DATA_COLUMNS = [c.name for c in JOBS.columns if c.name not in ("job_id", "recorded_at")]


def _insert(conn: Connection, table: Table) -> Any:
    name = conn.dialect.name
    if name == "postgresql":
        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"idempotent insert is not implemented for {name}")


def _chunks(rows: Sequence[dict[str, Any]]) -> Iterable[Sequence[dict[str, Any]]]:
    for start in range(0, len(rows), CHUNK):
        yield rows[start : start + CHUNK]


def round_row(event: RoundClosed) -> dict[str, Any]:
    return {
        "job_id": event.job_id,
        "round_index": event.round_index,
        "outcome": event.outcome,
        "demand": event.demand,
        "assigned": event.assigned,
        "results": event.results,
        "opened_at": event.opened_at,
        "closed_at": event.closed_at,
        "reason": event.reason,
        "sched_delay_s": event.sched_delay_s,
        "response_time_s": event.response_time_s,
        "event_id": event.event_id,
    }


CLOSE_CONTENT = ("outcome", "demand", "assigned", "results", "opened_at", "closed_at", "reason")


def conflicting_closes(conn: Connection, rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Rows that close an attempt already closed differently: {their event id: the event id
    of the close that stands}. (A replay, same event id or same content, is no conflict.)"""
    keys = list({(r["job_id"], r["round_index"]) for r in rows})
    stored: dict[tuple[str, int], Any] = {}
    for start in range(0, len(keys), CHUNK):
        chunk = keys[start : start + CHUNK]
        query = select(ROUNDS).where(tuple_(ROUNDS.c.job_id, ROUNDS.c.round_index).in_(chunk))
        stored.update({(r.job_id, r.round_index): r for r in conn.execute(query)})
    conflicts: dict[str, str] = {}
    for row in rows:
        first = stored.get((row["job_id"], row["round_index"]))
        if first is None or first.event_id == row["event_id"]:
            continue
        if any(getattr(first, name) != row[name] for name in CLOSE_CONTENT):
            conflicts[row["event_id"]] = first.event_id
    return conflicts


def record_rounds(conn: Connection, rows: Sequence[dict[str, Any]]) -> int:
    """Insert round rows, ignoring (job_id, round_index) already present. Returns rows added."""
    added = 0
    for chunk in _chunks(rows):
        stmt: Insert = _insert(conn, ROUNDS).values(list(chunk))
        stmt = stmt.on_conflict_do_nothing(index_elements=["job_id", "round_index"])  # type: ignore[attr-defined]
        # RETURNING, not rowcount: with SQLAlchemy 2.1 + psycopg 3.3 a multi-VALUES insert
        # reports rowcount 0 even when rows were inserted.
        added += len(conn.execute(stmt.returning(ROUNDS.c.id)).all())
    return added


def _job_fields(event: Event) -> dict[str, Any] | None:
    if isinstance(event, JobRegistered):
        return {
            "registered_at": event.time,
            "demand": event.demand,
            "rounds": event.rounds,
            "deadline_s": event.deadline_s,
            "workload_s": event.workload_s,
            "requirement": dict(event.requirement),
        }
    if isinstance(event, JobFinished):
        return {
            "arrival": event.arrival,
            "finished_at": event.finished_at,
            "rounds_completed": event.rounds_completed,
            "jct_s": event.jct_s,
        }
    if isinstance(event, JobCancelled):
        return {"cancelled_at": event.time, "cancel_reason": event.reason}
    if isinstance(event, JobExpired):
        return {"expired_at": event.time, "expire_reason": event.reason}
    return None


def job_rows_from_events(events: Iterable[Event]) -> list[dict[str, Any]]:
    """One merged row per job from its lifecycle events (first value of a field wins)."""
    merged: dict[str, dict[str, Any]] = {}
    for event in events:
        fields = _job_fields(event)
        if fields is None:
            continue
        row = merged.setdefault(event.job_id, {"job_id": event.job_id})  # type: ignore[attr-defined]
        for key, value in fields.items():
            row.setdefault(key, value)
    return [
        {col: row.get(col) for col in ("job_id", *_JOB_DATA_COLUMNS)} for row in merged.values()
    ]


def record_jobs(conn: Connection, rows: Sequence[dict[str, Any]]) -> int:
    """Upsert job rows: a column already set keeps its first value (replays are no-ops),
    a column still NULL takes the new one (events from different topics arrive in any order)."""
    if not rows:
        return 0
    touched = 0
    for chunk in _chunks(rows):
        stmt = _insert(conn, JOBS).values(list(chunk))
        excluded = stmt.excluded
        stmt = stmt.on_conflict_do_update(
            index_elements=["job_id"],
            set_={col: func.coalesce(JOBS.c[col], excluded[col]) for col in _JOB_DATA_COLUMNS},
        )
        touched += len(conn.execute(stmt.returning(JOBS.c.job_id)).all())
    return touched


def history_row(event: Event) -> dict[str, Any] | None:
    """The job_history row of an event of a job's life (None for other events)."""
    round_index: int | None = None
    if isinstance(event, JobRegistered):
        kind, detail = "registered", f"demand {event.demand} x {event.rounds} rounds"
    elif isinstance(event, RoundRequested):
        kind, round_index, detail = "round_requested", event.round_index, f"demand {event.demand}"
    elif isinstance(event, RoundClosed):
        kind, round_index = f"round_{event.outcome}", event.round_index
        detail = (
            f"{event.results}/{event.demand} results, {event.assigned} assigned, "
            f"waited {event.sched_delay_s:.1f} s for devices; {event.reason}".rstrip("; ")
        )
    elif isinstance(event, JobFinished):
        kind, detail = "finished", f"{event.rounds_completed} rounds, JCT {event.jct_s:.1f} s"
    elif isinstance(event, JobCancelled):
        kind, detail = "cancelled", event.reason
    elif isinstance(event, JobExpired):
        kind, detail = "expired", event.reason
    elif isinstance(event, JobAdmission):
        if event.registration is not None and event.decision == "admitted":
            return None  # the scheduler confirming a registration: the `registered` row says it
        kind, detail = event.decision, event.reason
        if event.estimate is not None:
            detail = f"{detail}; estimated completion at {event.estimate:.0f}"
    else:
        return None
    return {
        "job_id": event.job_id,
        "event_id": event.event_id,
        "time": event.time,
        "kind": kind,
        "round_index": round_index,
        "detail": detail,
    }


def record_history(conn: Connection, rows: Sequence[dict[str, Any]]) -> int:
    """Insert history rows, ignoring event ids already present. Returns rows added."""
    added = 0
    for chunk in _chunks(rows):
        stmt = _insert(conn, HISTORY).values(list(chunk))
        stmt = stmt.on_conflict_do_nothing(index_elements=["event_id"])
        added += len(conn.execute(stmt.returning(HISTORY.c.id)).all())
    return added
