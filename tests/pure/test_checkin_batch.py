"""Columnar check-in batches: the fast decoder accepts exactly what the strict one accepts,
a batch decided as arrays decides as check-ins one by one, and the scheduler reads its own
assignment batches back without decoding them."""

from __future__ import annotations

import json
import random
from functools import partial
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from tests import factories
from venn import events as ev
from venn.checkin_columns import AttrsCache, CheckinColumns, checkin_columns
from venn.core import make_scheduler
from venn.core.model import JobSpec, Requirement
from venn.settings import SchedulerSettings

NOW = 1000.0


def item(i: int, **changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "device_checkin",
        "event_id": f"c-{i}",
        "time": NOW,
        "device_id": f"d-{i}",
        "attrs": {"ram": 8.0, "cpu_f": float(i % 3)},
        "speed_ms_per_sample": 60.0,
        "bandwidth_kbps": 12000.0,
    }
    out.update(changes)
    return {k: v for k, v in out.items() if v is not None}


def batch(items: list[dict[str, Any]], **changes: Any) -> bytes:
    out: dict[str, Any] = {
        "type": "checkin_batch",
        "event_id": "b-1",
        "time": NOW,
        "checkins": items,
        "reply_to": "gw",
    }
    out.update(changes)
    return json.dumps({k: v for k, v in out.items() if v is not None}).encode()


GOOD = [item(i) for i in range(5)]
CASES = [
    batch(GOOD),
    batch(GOOD, reply_to=None),
    batch([]),
    batch([item(0, observe_only=True), item(1, observe_only=False)]),
    batch([item(0, event_id="c 0")]),  # whitespace in an id
    batch([item(0, device_id="d\x7f")]),
    batch([item(0, device_id="d\u0085")]),  # a C1 control character
    batch([item(0, device_id="dé")]),  # non-ASCII, allowed
    batch([item(0, device_id="d\u202eexe.jpg")]),  # direction override
    batch([item(0, device_id="d\U000e0041")]),  # a tag character
    batch([item(0, device_id="d\n")]),  # the strict pattern's `$` admits a final newline
    batch([item(0, device_id="")]),
    batch([item(0, device_id="x" * 129)]),
    batch([item(0, event_id="x" * 65)]),
    batch(GOOD, event_id="b 1"),
    batch(GOOD, reply_to="g w"),
    batch([item(0, attrs={"bad name": 1.0})]),
    batch([item(0, attrs={"ram": 1e13})]),
    batch([item(0, attrs={f"a{i}": 1.0 for i in range(33)})]),
    batch([item(0, attrs=[1, 2])]),
    batch([item(0, attrs="ram")]),
    batch([item(0, time=-1.0)]),
    batch([item(0, speed_ms_per_sample=1e8)]),
    batch([item(0, bandwidth_kbps="fast")]),
    batch([item(0, extra=1)]),
    batch([item(0, schema_version=2)]),
    batch([item(0, type="assignment")]),
    batch([item(0, type=None)]),
    batch([item(0, observe_only="yes")]),
    batch(GOOD, schema_version=2),
    batch(GOOD, extra=True),
    batch(GOOD, type="device_checkin"),
    batch([item(i) for i in range(1025)]),
    json.dumps(item(0)).encode(),  # a single check-in: strict decoding's
    b"",
    b"not json",
    b"[]",
]


@pytest.mark.parametrize("raw", CASES, ids=range(len(CASES)))
def test_fast_decoder_accepts_exactly_what_the_strict_one_accepts(raw: bytes) -> None:
    try:
        strict: ev.Event | None = ev.decode(raw, ev.ALLOWED_ON["venn.checkins"])
    except ev.InvalidEvent:
        strict = None
    fast = checkin_columns(raw, AttrsCache())
    if fast is None:
        return  # the caller decodes strictly: the same outcome by construction
    assert isinstance(strict, ev.CheckinBatch), "the fast decoder accepted a bad message"
    expected = CheckinColumns.of(strict)
    assert fast.event_id == expected.event_id and fast.reply_to == expected.reply_to
    assert fast.event_ids == expected.event_ids and fast.device_ids == expected.device_ids
    for key, other in zip(fast.attr_keys, expected.attr_keys, strict=True):
        assert fast.attrs[key] == expected.attrs[other]
    for name in ("times", "speeds", "bandwidths", "observe_only", "counted"):
        assert np.array_equal(getattr(fast, name), getattr(expected, name))


def test_fast_decoder_takes_the_gateways_batches() -> None:
    items = [
        ev.encode(
            ev.DeviceCheckin(
                event_id=f"c-{i}",
                time=NOW,
                device_id=f"d-{i}",
                attrs={"ram": 8.0},
                speed_ms_per_sample=60.0,
                bandwidth_kbps=12000.0,
            )
        )
        for i in range(3)
    ]
    cols = checkin_columns(ev.encode_checkin_batch("b", NOW, items, "gw"), AttrsCache())
    assert cols is not None and cols.device_ids == ["d-0", "d-1", "d-2"]
    assert len(set(cols.attr_keys)) == 1


def jobs_for(policy: str, rng: random.Random) -> Any:
    sched = make_scheduler(policy, seed=3)
    for j in range(rng.randint(1, 4)):
        req = Requirement.of(cpu=float(rng.randint(0, 2)))
        spec = JobSpec(f"j{j}", req, rng.randint(1, 6), rounds=3, deadline=10.0)
        sched.add_job(spec, 0.0)
        sched.request_round(spec.job_id, 0, 0.0)
    return sched


@settings(max_examples=60, deadline=None)
@given(
    policy=st.sampled_from(["fifo", "srsf", "random", "venn"]),
    seed=st.integers(0, 10_000),
    batches=st.integers(1, 4),
)
def test_a_batch_decides_as_its_checkins_one_by_one(policy: str, seed: int, batches: int) -> None:
    rng = random.Random(seed)
    one, many = jobs_for(policy, random.Random(seed)), jobs_for(policy, random.Random(seed))
    holder: dict[str, tuple[str, int]] = {}
    per_round: dict[str, int] = {}
    for b in range(batches):
        now = 1.0 + b
        n = rng.randint(1, 20)
        devices = [f"d{rng.randint(0, 25)}" for _ in range(n)]
        attrs = [{"cpu_f": float(rng.randint(0, 2))} for _ in range(n)]
        tiers = np.array([rng.randint(0, one.num_tiers - 1) for _ in range(n)])
        us = [rng.random() for _ in range(n)]
        # The supply window sees the whole batch first in both (checkin_batch observes).
        slots = np.array([one.slot_of(a) for a in attrs])
        assert np.array_equal(slots, [many.slot_of(a) for a in attrs])
        one.observe_many(slots, np.full(n, now))
        expected = []
        for i in range(n):
            a = one._decide(int(slots[i]), now, int(tiers[i]), us[i], devices[i])
            expected.append(-1 if a is None else one.jobs[a.job_id].idx)
        got = many.checkin_batch(slots, now, tiers, partial(np.array, us), devices)
        assert got.tolist() == expected
        for i, idx in enumerate(got.tolist()):
            if idx < 0:
                continue
            js = many.by_idx[idx]
            assert js.spec.requirement.admits(attrs[i]), "ineligible assignment"
            assert devices[i] not in holder, "device double-booked"
            holder[devices[i]] = (js.spec.job_id, js.round_index)
            per_round[js.spec.job_id] = per_round.get(js.spec.job_id, 0) + 1
            assert per_round[js.spec.job_id] <= js.spec.demand, "more than D"


def open_round_state(
    demand: int, jobs: dict[bytes, Any] | None = None, rounds: dict[bytes, Any] | None = None
) -> SchedulerState:
    """A fifo worker's state with job "j" (ram >= 4) registered and its round 0 open."""
    config = SchedulerSettings(policy="fifo")
    s = SchedulerState(
        config, MemoryStore({} if jobs is None else jobs, {} if rounds is None else rounds)
    )
    s.ensure_loaded(NOW)
    registered = ev.JobRegistered(
        event_id="reg", time=NOW, job_id="j", requirement={"ram": 4.0}, demand=demand,
        rounds=1, deadline_s=60, workload_s=5,
    )  # fmt: skip
    s.on_job_event(registered, NOW)
    request = ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=demand)
    s.on_job_event(request, NOW)
    return s


def test_columns_decide_and_write_their_row_and_a_replay_assigns_nothing() -> None:
    jobs: dict[bytes, Any] = {}
    rounds: dict[bytes, Any] = {}
    s = open_round_state(3, jobs, rounds)
    cols = checkin_columns(batch([item(i) for i in range(5)]), AttrsCache())
    assert cols is not None
    out = s.on_checkin_batch(cols, NOW)
    assigned, declined = out
    assert isinstance(assigned, ev.AssignmentBatch) and isinstance(declined, ev.CheckinsDeclined)
    assert [a.device_id for a in assigned.assignments] == ["d-0", "d-1", "d-2"]
    assert declined.checkin_ids == ["c-3", "c-4"]
    assert len(rounds) == 1
    # A replayed batch (same check-ins, the devices now busy) assigns nothing.
    again = s.on_checkin_batch(cols, NOW)
    assert all(not isinstance(o, ev.AssignmentBatch) for o in again)
    stale = checkin_columns(batch([item(7, time=NOW - 60)], event_id="b-2"), AttrsCache())
    assert stale is not None
    (declined_stale,) = s.on_checkin_batch(stale, NOW)
    assert isinstance(declined_stale, ev.CheckinsDeclined)
    assert declined_stale.checkin_ids == ["c-7"]
    assert s.stale_checkins == 1


def test_one_slot_per_distinct_attribute_set_until_a_new_threshold() -> None:
    sched = make_scheduler("fifo")
    sched.add_job(JobSpec("a", Requirement.of(ram=4.0), 2, rounds=1, deadline=10.0), 0.0)
    keys = [b"x", b"y", b"x"]
    attrs = {b"x": {"ram": 8.0}, b"y": {"ram": 2.0}}
    slots = sched.index.slots_for(keys, attrs)
    assert slots[0] == slots[2] != slots[1]
    sched.add_job(JobSpec("b", Requirement.of(ram=6.0), 2, rounds=1, deadline=10.0), 0.0)
    again = sched.index.slots_for(keys, attrs)
    assert again.tolist() == [sched.slot_of(attrs[k]) for k in keys]


def test_dead_ids_do_not_reach_the_columns() -> None:
    raw = batch([item(0, device_id="d\x00")])
    assert checkin_columns(raw, AttrsCache()) is None
    with pytest.raises(ev.InvalidEvent):
        ev.decode(raw, ev.ALLOWED_ON["venn.checkins"])
    assert msgspec.json.decode(raw)["checkins"][0]["device_id"] == "d\x00"


def test_hold_times_go_with_the_round() -> None:
    s = open_round_state(2)
    cols = checkin_columns(batch([item(i) for i in range(2)]), AttrsCache())
    assert cols is not None
    assigned = s.on_checkin_batch(cols, NOW)[0]
    assert isinstance(assigned, ev.AssignmentBatch)
    assert set(s.liveness.held_since) == {"d-0", "d-1"}
    finished = ev.JobFinished(
        event_id="fin", time=NOW, job_id="j", rounds_completed=0, arrival=NOW,
        finished_at=NOW, jct_s=0.0,
    )  # fmt: skip
    s.on_round_event(finished, NOW)
    assert s.liveness.held_since == {}
    assert s.core.active_devices == {}


@pytest.mark.parametrize("char", ["\U000e0041", "\u034f", "\u17b4", "\u2800", "\ufe0f", "\u202e"])
def test_ids_with_tag_joiner_or_blank_characters_are_refused_on_every_path(char: str) -> None:
    """Issue 34, item 11: tag characters (U+E0041 spells a hidden "A"), the combining
    grapheme joiner U+034F, the Khmer inherent vowel U+17B4 and the Braille blank U+2800
    were still accepted in ids; and the check-in batches' fast decoder let every invisible
    or direction-changing character through (it knew only control characters)."""
    device = f"dev{char}1"
    raw = batch([item(0, device_id=device)])
    with pytest.raises(ev.InvalidEvent):
        ev.decode(raw, ev.ALLOWED_ON["venn.checkins"])
    assert checkin_columns(raw, AttrsCache()) is None
    with pytest.raises(ev.InvalidEvent):
        ev.decode(ev.encode(factories.registered(f"job{char}")), (ev.JobRegistered,))
