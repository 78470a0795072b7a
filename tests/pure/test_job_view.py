"""Why a job waits (services/gateway/job_view.py), from the lifecycle fold and the
scheduler's snapshot: a snapshot that does not know the job's open round says nothing."""

from __future__ import annotations

from services.gateway.demand import DemandView
from services.gateway.job_view import job_summary
from venn import events as ev
from venn.core.status import DeviceGroup, JobGroup, JobPlacement, SchedulerStatus


def snapshot(*jobs: JobPlacement, at: float = 100.0) -> SchedulerStatus:
    return SchedulerStatus(
        time=at, worker="w", policy="venn", window=40, checkin_rate_per_s=1.0,
        busy_devices=0, device_groups=[DeviceGroup(0, [0], 10, 1.0, [])],
        job_groups=[JobGroup(0, {"ram": 2.0}, ["j"], [], 1.0)], jobs=list(jobs),
    )  # fmt: skip


def waiting(view: DemandView, status: SchedulerStatus | None, now: float = 101.0) -> str | None:
    return job_summary(view, view.book.get("j"), status, now)["waiting"]


def test_the_wait_reason_comes_only_from_a_fresh_snapshot_that_knows_the_round() -> None:
    view = DemandView()
    view.apply(
        ev.JobRegistered(
            event_id="reg", time=90.0, job_id="j", requirement={"ram": 2.0}, demand=2,
            rounds=2, deadline_s=60, workload_s=5,
        )
    )  # fmt: skip
    assert waiting(view, None) == "waiting_for_coordinator"
    view.apply(ev.RoundRequested(event_id="rr", time=95.0, job_id="j", round_index=0, demand=2))
    assert waiting(view, None) == "unknown"
    assert waiting(view, snapshot()) == "unknown"  # another worker's jobs, or taken earlier
    assert waiting(view, snapshot(JobPlacement("j", 0, False, 0, False))) == "unknown"
    starved = snapshot(JobPlacement("j", 0, True, 2, False))
    assert waiting(view, starved) == "group_starved"
    assert waiting(view, starved, now=200.0) == "unknown"  # stale
    assert waiting(view, snapshot(JobPlacement("j", 0, True, 2, True))) is None  # served
