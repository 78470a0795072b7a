"""The gateway's queue check (`services.gateway.admission_gate.due`) over a full queue: the
jobs it admits, in order, and the supply it counts once per requirement, not once per
queued job (a full queue held the event loop for about 100 ms of CPU every check: issue 34,
the flood)."""

from __future__ import annotations

import pytest

from services.gateway import admission_gate
from services.gateway.demand import DemandView
from venn import events as ev
from venn.core.admission import Limits, SupplySeen
from venn.core.model import Requirement
from venn.core.status import SchedulerStatus, SlotSupply

NOW = 10_000.0


def _queued(view: DemandView, i: int, requirement: dict[str, float]) -> None:
    view.apply(
        ev.JobAdmission(
            event_id=f"queue:{i}",
            time=NOW - 500 + i,
            job_id=f"job-{i:03d}",
            decision="queued",
            reason="no_eligible_supply: none yet",
            requirement=requirement,
            demand=10,
            rounds=5,
            deadline_s=60.0,
            owner=f"owner-{i % 7}",
        )
    )


def _status(mix: list[SlotSupply]) -> SchedulerStatus:
    return SchedulerStatus(
        time=NOW,
        worker="w",
        policy="venn",
        window=sum(s.checkins for s in mix),
        checkin_rate_per_s=100.0,
        busy_devices=0,
        device_groups=[],
        job_groups=[],
        jobs=[],
        supply_mix=mix,
    )


def test_a_full_queue_is_judged_against_each_requirements_supply_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = DemandView()
    for i in range(300):  # two requirements, interleaved: one some devices meet, one none
        _queued(view, i, {"gpu": 1.0} if i % 2 else {"ram": 2.0})
    mix = [SlotSupply({"ram": float(r), "gpu": 0.0}, 40) for r in range(1, 9)]
    counted: list[Requirement] = []
    real = admission_gate.supply_seen

    def supply_seen(status: SchedulerStatus | None, requirement: Requirement) -> SupplySeen:
        counted.append(requirement)
        return real(status, requirement)

    monkeypatch.setattr(admission_gate, "supply_seen", supply_seen)
    due = admission_gate.due(view, _status(mix), Limits(max_running_jobs=20), NOW)
    assert sorted(counted) == sorted({Requirement.of(ram=2.0), Requirement.of(gpu=1.0)})
    # The ram jobs, oldest first, up to the running-jobs limit; no device has a GPU.
    assert [life.job_id for life, _ in due] == [f"job-{i:03d}" for i in range(0, 40, 2)]
