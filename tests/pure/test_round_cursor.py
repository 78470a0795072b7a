"""The replay rules of round attempts (`venn.core.round_cursor`), and the two readers that
fold with them: the core's scheduler and the scheduler worker's state."""

from __future__ import annotations

import random
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from venn import events as ev
from venn.core.model import JobSpec, Requirement
from venn.core.registry import make_scheduler
from venn.core.round_cursor import Applied, IndexSet, RoundCursor
from venn.core.snapshot import JobSnapshot, decode_snapshot, restore_job, snapshot_job
from venn.settings import SchedulerSettings

NOW = 1000.0


@given(st.lists(st.integers(0, 40), max_size=80))
def test_an_index_set_is_a_set(indices: list[int]) -> None:
    kept = IndexSet()
    seen: set[int] = set()
    for i in indices:
        assert kept.add(i) == (i not in seen)
        seen.add(i)
    assert all((i in kept) == (i in seen) for i in range(-2, 45))
    assert kept.last == max(seen, default=-1)
    assert kept.above == sorted(i for i in seen if i >= kept.below)


def test_an_index_set_stays_small_when_rounds_come_in_order() -> None:
    kept = IndexSet()
    for i in [1, 0, *range(2, 1000)]:
        kept.add(i)
    assert (kept.below, kept.above) == (1000, [])


def test_the_rules_of_one_attempt() -> None:
    c = RoundCursor()
    assert c.request(0) is Applied.CHANGED and c.open_index == 0
    assert c.request(0) is Applied.REPLAY
    assert c.close(0) is Applied.CHANGED and c.open_index is None
    assert c.close(0) is Applied.REPLAY
    assert c.request(0) is Applied.REPLAY
    # a close that overtook its request: the request then opens nothing
    assert c.close(1) is Applied.CHANGED
    assert c.request(1) is Applied.CHANGED and c.open_index is None
    # a newer request supersedes an attempt still open; its request read late is stale
    assert c.request(3) is Applied.CHANGED and c.open_index == 3
    assert c.request(2) is Applied.STALE
    assert c.close(2) is Applied.CHANGED and c.open_index == 3  # its close still counts
    assert c.end() is Applied.CHANGED and c.end() is Applied.REPLAY
    assert c.open_index is None and c.request(4) is Applied.STALE


@given(st.integers(1, 6), st.randoms(use_true_random=False))
def test_any_order_of_two_topics_gives_one_position(rounds: int, rng: random.Random) -> None:
    """Requests in order on one topic, closes in order on another, interleaved anyhow and
    read twice: every close counts once, and the last attempt is open only if its close
    was not read."""
    requests = [("request", i) for i in range(rounds)]
    closes = [("close", i) for i in range(rounds - 1)]
    merged: list[tuple[str, int]] = []
    while requests or closes:
        source = requests if (requests and (not closes or rng.random() < 0.5)) else closes
        merged.append(source.pop(0))
    c = RoundCursor()
    counted = 0
    for kind, i in merged + merged:
        if kind == "request":
            c.request(i)
        else:
            counted += c.close(i) is Applied.CHANGED
    assert counted == rounds - 1
    assert c.open_index == rounds - 1


# -- the core's scheduler ----------------------------------------------------------------
def core_with_job(rounds: int = 3) -> Any:
    core = make_scheduler("fifo", seed=1)
    core.add_job(JobSpec("j", Requirement.of(ram=4.0), 2, rounds=rounds, deadline=60.0), 0.0)
    return core


def test_a_close_read_before_its_request_opens_no_round() -> None:
    core = core_with_job()
    assert core.request_round("j", 0, 1.0) and core.close_round("j", 0, 2.0, True)
    assert core.close_round("j", 1, 3.0, True)  # venn.rounds read ahead of venn.jobs
    assert not core.request_round("j", 1, 4.0)
    js = core.jobs["j"]
    assert not js.wants_devices and (js.attempts, js.rounds_done) == (2, 2)


def test_a_close_read_after_a_newer_request_still_counts() -> None:
    core = core_with_job()
    assert core.request_round("j", 0, 1.0)
    assert core.request_round("j", 1, 2.0)  # venn.jobs read ahead: round 0 ends here
    assert core.close_round("j", 0, 3.0, True)
    js = core.jobs["j"]
    assert js.round_open and js.round_index == 1 and js.rounds_done == 1
    assert not core.close_round("j", 0, 3.5, True)  # its replay does not
    assert core.close_round("j", 1, 4.0, True) and js.rounds_done == 2 and not js.round_open


def test_a_snapshot_keeps_the_cursor_and_an_old_one_derives_it() -> None:
    core = core_with_job()
    core.request_round("j", 0, 1.0)
    core.close_round("j", 0, 2.0, True)
    core.close_round("j", 1, 3.0, False)
    stored = msgspec.to_builtins(snapshot_job(core.jobs["j"]))
    again = make_scheduler("fifo", seed=1)
    assert restore_job(again, decode_snapshot(stored), 4.0)
    assert again.jobs["j"].rounds == core.jobs["j"].rounds
    assert not again.request_round("j", 1, 5.0)  # it still knows round 1 was closed

    old = {k: v for k, v in stored.items() if k != "rounds"}  # a row from before the cursor
    snap: JobSnapshot = decode_snapshot(old)
    assert snap.rounds is None
    older = make_scheduler("fifo", seed=1)
    restore_job(older, snap, 4.0)
    assert older.jobs["j"].rounds == RoundCursor.at(snap.round_index, snap.round_open)
    assert older.request_round("j", 2, 5.0)


# -- the scheduler worker ----------------------------------------------------------------
def job_events() -> tuple[ev.JobRegistered, ev.RoundRequested, ev.RoundClosed]:
    registered = ev.JobRegistered(
        event_id="reg", time=NOW, job_id="j", requirement={"ram": 4.0}, demand=2, rounds=2,
        deadline_s=60, workload_s=5,
    )  # fmt: skip
    requested = ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=2)
    closed = ev.RoundClosed(
        event_id="rc", time=NOW, job_id="j", round_index=0, outcome="failed", demand=2,
        assigned=0, results=0, opened_at=NOW, closed_at=NOW, reason="deadline",
        sched_delay_s=0.0, response_time_s=0.0,
    )  # fmt: skip
    return registered, requested, closed


def test_the_worker_assigns_nothing_to_a_round_closed_before_its_request_was_read() -> None:
    """venn.jobs and venn.rounds are read by separate agents: a worker catching up may
    read a round's close first. Before the shared rules it opened that round on the
    request read next, and assigned devices to a round whose coordinator had moved on."""
    jobs: dict[bytes, Any] = {}
    s = SchedulerState(SchedulerSettings(policy="fifo"), MemoryStore(jobs))
    s.ensure_loaded(NOW)
    registered, requested, closed = job_events()
    s.on_job_event(registered, NOW)
    assert s.on_round_event(closed, NOW)
    s.on_job_event(requested, NOW)
    checkin = ev.DeviceCheckin(
        event_id="c", time=NOW, device_id="d", attrs={"ram": 8.0}, speed_ms_per_sample=60.0,
        bandwidth_kbps=12000.0,
    )  # fmt: skip
    assert s.on_checkin(checkin, NOW) is None
    assert s.core.jobs["j"].attempts == 1
    stored = msgspec.json.decode(jobs[b'"j"'])
    assert stored["core"]["rounds"]["closed"] == {"below": 1, "above": []}
