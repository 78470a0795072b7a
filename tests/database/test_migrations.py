"""Alembic migrations and idempotent audit writes on real Postgres (and SQLite)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.exc import IntegrityError

from tests import factories
from venn import fields
from venn.audit import (
    Base,
    create_database,
    downgrade_database,
    drop_database,
    job_rows_from_events,
    make_engine,
    record_jobs,
    record_rounds,
    round_row,
    upgrade_database,
)
from venn.events import JobCancelled, JobFinished, JobRegistered, RoundClosed, decode, encode


@pytest.fixture
def scratch_pg(pg_admin_url: str) -> Iterator[str]:
    """A database of this test's own (migrations are destructive)."""
    url = create_database(pg_admin_url, f"venn_mig_{uuid.uuid4().hex[:10]}")
    try:
        yield url
    finally:
        drop_database(url)


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def schema_diff(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def closed(
    job: str, index: int, outcome: Literal["succeeded", "failed"] = "succeeded", results: int = 8
) -> RoundClosed:
    return factories.closed(
        job, index, outcome, demand=10, results=results, opened_at=float(index),
        closed_at=10.0 + index, reason="" if outcome == "succeeded" else "deadline",
        sched_delay_s=0.5, response_time_s=9.5, event_id=f"{job}-r{index}-closed",
    )  # fmt: skip


def test_upgrade_downgrade_upgrade_on_postgres(scratch_pg: str) -> None:
    upgrade_database(scratch_pg)
    assert {"job_audit", "round_audit", "alembic_version"} <= tables(scratch_pg)
    assert schema_diff(scratch_pg) == []
    downgrade_database(scratch_pg)
    assert tables(scratch_pg) == {"alembic_version"}
    upgrade_database(scratch_pg)
    assert {"job_audit", "round_audit"} <= tables(scratch_pg)
    assert schema_diff(scratch_pg) == []


def test_migrations_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sub' / 'audit.sqlite'}"
    upgrade_database(url)
    assert schema_diff(url) == []
    downgrade_database(url)
    upgrade_database(url)
    assert {"job_audit", "round_audit"} <= tables(url)


def test_unique_constraint_holds(pg_url: str) -> None:
    engine = make_engine(pg_url)
    job = f"uq-{uuid.uuid4().hex[:6]}"
    row = round_row(closed(job, 0))
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(Base.metadata.tables["round_audit"]).values(row))
        with (
            pytest.raises(IntegrityError, match="uq_round_audit_job_id_round_index"),
            engine.begin() as conn,
        ):
            conn.execute(sa.insert(Base.metadata.tables["round_audit"]).values(row))
        with pytest.raises(IntegrityError, match="ck_round_audit_outcome"), engine.begin() as conn:
            conn.execute(
                sa.insert(Base.metadata.tables["round_audit"]).values(
                    {**round_row(closed(job, 1)), "outcome": "maybe"}
                )
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_idempotent_batched_writes(backend: str, pg_url: str, tmp_path: Path) -> None:
    url = pg_url if backend == "postgresql" else f"sqlite:///{tmp_path / 'a.sqlite'}"
    if backend == "sqlite":
        upgrade_database(url)
    job = f"idem-{uuid.uuid4().hex[:6]}"
    # A failed attempt and its retry are different round indexes; 0 is replayed 3 times.
    batch = [closed(job, 0), closed(job, 1, "failed", 2), closed(job, 0), closed(job, 2)]
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            added = record_rounds(conn, [round_row(e) for e in batch])
        with engine.begin() as conn:
            added_again = record_rounds(conn, [round_row(e) for e in batch])
            # A replay with different content must not overwrite the first close.
            record_rounds(conn, [round_row(closed(job, 0, "failed", 0))])
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT round_index, outcome, results FROM round_audit "
                    "WHERE job_id = :j ORDER BY round_index"
                ),
                {"j": job},
            ).all()
        assert added == 3
        assert added_again == 0
        assert [tuple(r) for r in rows] == [
            (0, "succeeded", 8),
            (1, "failed", 2),
            (2, "succeeded", 8),
        ]

        registered = JobRegistered(
            event_id=f"{job}-reg", time=1.0, job_id=job, requirement={"ram": 2.0},
            demand=10, rounds=3, deadline_s=60, workload_s=5,
        )  # fmt: skip
        finished = JobFinished(
            event_id=f"{job}-done", time=20.0, job_id=job, rounds_completed=2,
            arrival=1.0, finished_at=20.0, jct_s=19.0,
        )  # fmt: skip
        cancel = JobCancelled(event_id=f"{job}-c", time=30.0, job_id=job, reason="late")
        with engine.begin() as conn:
            # finished arrives before registered (different topics), then a replay of both.
            record_jobs(conn, job_rows_from_events([finished]))
            record_jobs(conn, job_rows_from_events([registered, finished, registered]))
            record_jobs(conn, job_rows_from_events([cancel]))
            record_jobs(conn, job_rows_from_events([cancel]))
        with engine.connect() as conn:
            job_rows = conn.execute(
                sa.text(
                    "SELECT registered_at, demand, finished_at, jct_s, cancel_reason "
                    "FROM job_audit WHERE job_id = :j"
                ),
                {"j": job},
            ).all()
        assert [tuple(r) for r in job_rows] == [(1.0, 10, 20.0, 19.0, "late")]
    finally:
        engine.dispose()


def test_batch_larger_than_a_chunk_is_written(pg_url: str) -> None:
    job = f"bulk-{uuid.uuid4().hex[:6]}"
    rows = [round_row(closed(job, i)) for i in range(1234)]
    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:
            assert record_rounds(conn, rows) == 1234
        with engine.connect() as conn:
            count = conn.execute(
                sa.text("SELECT count(*) FROM round_audit WHERE job_id = :j"), {"j": job}
            ).scalar_one()
        assert count == 1234
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_every_value_the_events_allow_fits_the_audit_tables(
    backend: str, pg_url: str, tmp_path: Path
) -> None:
    """Defect 3 of issue 12: valid events the tables could not hold (a job id over 200
    characters, integers of 2**31, NUL characters) wedged the recorder. Now the events'
    bounds are what the tables hold: values at every bound are written and read back."""
    url = pg_url if backend == "postgresql" else f"sqlite:///{tmp_path / 'b.sqlite'}"
    if backend == "sqlite":
        upgrade_database(url)
    job = "é" + "j" * (fields.ID_MAX - 1)  # multi-byte, at the length bound
    text = "ü" * fields.TEXT_MAX
    registered = JobRegistered(
        event_id="e" * fields.EVENT_ID_MAX, time=fields.TIME_MAX, job_id=job,
        requirement={f"a{i}": -fields.MEASURE_MAX for i in range(fields.ATTRS_MAX)},
        demand=fields.DEMAND_MAX, rounds=fields.ROUNDS_MAX, deadline_s=fields.DURATION_MAX,
        workload_s=fields.DURATION_MAX,
    )  # fmt: skip
    close = RoundClosed(
        event_id="c" * fields.EVENT_ID_MAX, time=fields.TIME_MAX, job_id=job,
        round_index=fields.INDEX_MAX, outcome="failed", demand=fields.DEMAND_MAX,
        assigned=fields.DEMAND_MAX, results=fields.DEMAND_MAX, opened_at=fields.TIME_MAX,
        closed_at=fields.TIME_MAX, reason=text, sched_delay_s=fields.DURATION_MAX,
        response_time_s=fields.DURATION_MAX,
    )  # fmt: skip
    finished = JobFinished(
        event_id="f" * fields.EVENT_ID_MAX, time=fields.TIME_MAX, job_id=job,
        rounds_completed=fields.INDEX_MAX, arrival=0.0, finished_at=fields.TIME_MAX,
        jct_s=fields.DURATION_MAX,
    )  # fmt: skip
    cancel = JobCancelled(event_id="x" * fields.EVENT_ID_MAX, time=1.0, job_id=job, reason=text)
    for event in (registered, close, finished, cancel):  # each one a valid event
        assert decode(encode(event), max_bytes=1 << 20) == event
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            assert record_rounds(conn, [round_row(close)]) == 1
            record_jobs(conn, job_rows_from_events([registered, finished, cancel]))
        with engine.connect() as conn:
            got = conn.execute(
                sa.text("SELECT round_index, reason, event_id FROM round_audit WHERE job_id = :j"),
                {"j": job},
            ).one()
            demand, rounds_completed = conn.execute(
                sa.text("SELECT demand, rounds_completed FROM job_audit WHERE job_id = :j"),
                {"j": job},
            ).one()
        assert tuple(got) == (fields.INDEX_MAX, text, close.event_id)
        assert (demand, rounds_completed) == (fields.DEMAND_MAX, fields.INDEX_MAX)
    finally:
        engine.dispose()
