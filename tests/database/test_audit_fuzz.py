"""Fuzzing the recorder's write path: every event the decoder accepts, at and near every
bound, is written to the real Postgres; every value past a bound is refused at decode."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from venn import fields
from venn.audit import job_rows_from_events, make_engine, record_jobs, record_rounds, round_row
from venn.events import InvalidEvent, JobRegistered, RoundClosed, decode

# Unicode without control characters and surrogates: what Text and Id allow.
TEXT_CHARS = st.characters(blacklist_categories=("Cc", "Cs"))
# Ids also refuse invisible and bidi-control characters (venn.fields): the Id pattern decides.
ID_CHARS = st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")).filter(
    lambda c: re.fullmatch(fields._ID_PATTERN, c) is not None
)


def ids(max_size: int) -> st.SearchStrategy[str]:
    edge = st.sampled_from([1, max_size]).flatmap(
        lambda n: st.text(ID_CHARS, min_size=n, max_size=n)
    )
    return st.text(ID_CHARS, min_size=1, max_size=max_size) | edge


def ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high) | st.sampled_from([low, high])


def floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False) | st.sampled_from([low, high])


closes: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    event_id=ids(fields.EVENT_ID_MAX),
    time=floats(0, fields.TIME_MAX),
    round_index=ints(0, fields.INDEX_MAX),
    outcome=st.sampled_from(["succeeded", "failed"]),
    demand=ints(1, fields.DEMAND_MAX),
    assigned=ints(0, fields.DEMAND_MAX),
    results=ints(0, fields.DEMAND_MAX),
    opened_at=floats(0, fields.TIME_MAX),
    closed_at=floats(0, fields.TIME_MAX),
    reason=st.text(TEXT_CHARS, max_size=fields.TEXT_MAX),
    sched_delay_s=floats(0, fields.DURATION_MAX),
    response_time_s=floats(0, fields.DURATION_MAX),
)
registrations: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    event_id=ids(fields.EVENT_ID_MAX),
    time=floats(0, fields.TIME_MAX),
    requirement=st.dictionaries(
        st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.\-]{0,20}\Z"),
        floats(-fields.MEASURE_MAX, fields.MEASURE_MAX),
        max_size=fields.ATTRS_MAX,
    ),
    demand=ints(1, fields.DEMAND_MAX),
    rounds=ints(1, fields.ROUNDS_MAX),
    deadline_s=st.floats(1e-9, fields.DURATION_MAX) | st.just(fields.DURATION_MAX),
    workload_s=floats(0, fields.DURATION_MAX),
)


@pytest.fixture(scope="module")
def engine(pg_url: str) -> Any:
    e = make_engine(pg_url)
    yield e
    e.dispose()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(close=closes, registration=registrations, job=ids(fields.ID_MAX))
def test_every_decodable_event_is_written(
    engine: Any, close: dict[str, Any], registration: dict[str, Any], job: str
) -> None:
    job = f"{job[: fields.ID_MAX - 9]}-{uuid.uuid4().hex[:8]}"  # unique per example
    raw_close = json.dumps({"type": "round_closed", "job_id": job, **close}).encode()
    raw_reg = json.dumps({"type": "job_registered", "job_id": job, **registration}).encode()
    event = decode(raw_close, max_bytes=1 << 20)
    registered = decode(raw_reg, max_bytes=1 << 20)
    assert isinstance(event, RoundClosed) and isinstance(registered, JobRegistered)
    with engine.begin() as conn:
        assert record_rounds(conn, [round_row(event)]) == 1
        record_jobs(conn, job_rows_from_events([registered]))
    with engine.connect() as conn:
        reason, index = conn.execute(
            sa.text("SELECT reason, round_index FROM round_audit WHERE job_id = :j"), {"j": job}
        ).one()
        demand = conn.execute(
            sa.text("SELECT demand FROM job_audit WHERE job_id = :j"), {"j": job}
        ).scalar_one()
    assert (reason, index, demand) == (event.reason, event.round_index, registered.demand)


PAST: dict[str, list[Any]] = {
    "job_id": ["x" * (fields.ID_MAX + 1), "a\x00b", "tab\there"],
    "event_id": ["e" * (fields.EVENT_ID_MAX + 1)],
    "round_index": [fields.INDEX_MAX + 1, -1, 2**63],
    "demand": [0, fields.DEMAND_MAX + 1],
    "assigned": [fields.DEMAND_MAX + 1],
    "reason": ["r" * (fields.TEXT_MAX + 1), "nul\x00"],
    "closed_at": [fields.TIME_MAX * 2, -1.0],
    "response_time_s": [fields.DURATION_MAX * 2],
}


@settings(max_examples=100, deadline=None)
@given(close=closes, data=st.data())
def test_every_value_past_a_bound_is_refused_at_decode(
    close: dict[str, Any], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(PAST)))
    doc = {
        "type": "round_closed",
        "job_id": "j",
        **close,
        name: data.draw(st.sampled_from(PAST[name])),
    }
    with pytest.raises(InvalidEvent) as info:
        decode(json.dumps(doc).encode(), max_bytes=1 << 20)
    assert info.value.kind == "invalid_value"
