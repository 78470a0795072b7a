"""What the scheduler's plan and supply look like from outside: a small snapshot the
scheduler publishes on venn.status (compacted) and the job API reads.

Pure: built from a core `Scheduler` and its current dispatch table; no I/O, no clock.

- A *job group* is the set of jobs with one requirement (the IRS problem's groups).
- A *device group* is a signature: the devices eligible for the same job groups.
- The plan says, per device group, which job groups its devices are offered to now (the
  head of each row of the dispatch table, every candidate when the policy picks
  uniformly), and per job which open job is served where. That is enough to tell why an
  open round waits: no device group is eligible for it (no supply), its group gets no
  device group (starved by the plan), or its group is fed but others of it come first
  (outranked).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import msgspec
import numpy as np

from venn.core.dispatch import DispatchTable
from venn.core.estimate import Band, job_loads, scheduler_bands, waste_factor
from venn.core.scheduler import Scheduler
from venn.core.supply import AttributeMix, ReportedSupply
from venn.events import InvalidEvent

WaitReason = Literal["no_eligible_supply", "group_starved", "outranked"]

ARRIVALS_KEPT = 200
"""Registrations a snapshot lists (what a gateway's submission estimate learns from)."""


class DeviceGroup(msgspec.Struct, frozen=True):
    signature: int
    eligible_groups: list[int]
    """Job groups its devices meet the requirement of."""
    checkins_in_window: int
    """Check-ins of the supply window (the last ``window`` check-ins) from this group."""
    checkin_rate_per_s: float
    feeds: list[int]
    """Job groups the plan offers its devices to now."""


class JobGroup(msgspec.Struct, frozen=True):
    group: int
    requirement: dict[str, float]
    open_jobs: list[str]
    """Jobs of the group with an open round and demand left."""
    fed_by: list[int]
    """Device groups (signatures) the plan gives it now."""
    eligible_rate_per_s: float
    """Check-ins per second from devices eligible for it."""


class JobPlacement(msgspec.Struct, frozen=True):
    job_id: str
    group: int
    round_open: bool
    remaining: int
    served: bool
    """Listed on some row of the dispatch table: the next eligible device may go to it."""
    estimated_finish: float | None = None
    """When the completion estimate (`venn.core.estimate`) says the job ends, its P50
    over scenarios of the jobs expected to arrive later; None: it cannot end at the
    current supply (or the snapshot predates estimates)."""
    estimated_finish_p90: float | None = None
    """The same estimate's P90 (None: not at the current supply, or no band)."""
    work: float = 0.0
    """Devices still to assign over the job's life (the estimate's input, as the
    ``latency_s`` below: what a gateway needs to estimate a job submitted next)."""
    latency_s: float = 0.0
    """The round latency (fill to close) the estimate uses for the job."""
    demand: int = 0
    needed: int = 0
    deadline_s: float = 0.0


class ArrivalSeen(msgspec.Struct, frozen=True):
    """A job the scheduler saw arrive, as a gateway's estimate of a submission draws the
    jobs expected after it (`venn.core.arrivals`)."""

    time: float
    group: int
    demand: int
    rounds: int
    needed: int
    deadline_s: float


class SlotSupply(msgspec.Struct, frozen=True):
    """Check-ins of the supply window from devices with these (projected) attributes."""

    attrs: dict[str, float]
    checkins: int


class SchedulerStatus(msgspec.Struct, frozen=True, tag="scheduler_status"):
    time: float
    worker: str
    policy: str
    window: int
    """Check-ins the supply figures are taken over."""
    checkin_rate_per_s: float
    busy_devices: int
    """Devices holding an assignment."""
    device_groups: list[DeviceGroup]
    job_groups: list[JobGroup]
    jobs: list[JobPlacement]
    supply_mix: list[SlotSupply] = []
    """The window's check-ins by attribute set: what admission judges a new requirement
    against."""
    gateways: int = 0
    """Gateways whose supply reports are live (0: supply counted from the check-ins read).
    Each gateway divides the fleet's forward quota and report rate by it."""
    arrivals: list[ArrivalSeen] = []
    """The last ARRIVALS_KEPT jobs registered, oldest first."""
    waste: float = 1.0
    """Devices assigned per device of demand of a successful round so far
    (`venn.core.estimate.waste_factor`)."""

    def job(self, job_id: str) -> JobPlacement | None:
        return _index(self)[0].get(job_id)

    def group(self, group: int) -> JobGroup | None:
        return _index(self)[1].get(group)


_INDEXED: list[tuple[SchedulerStatus, dict[str, JobPlacement], dict[int, JobGroup]]] = []


def _index(status: SchedulerStatus) -> tuple[dict[str, JobPlacement], dict[int, JobGroup]]:
    """The snapshot's jobs by id and groups by number, made once for the latest snapshot
    asked about: a listing asks once per job, and a scan of the snapshot's jobs each time
    cost a gateway's dashboard O(jobs^2) per second (issue 34, item 2)."""
    if not _INDEXED or _INDEXED[0][0] is not status:
        jobs = {j.job_id: j for j in reversed(status.jobs)}  # the first of an id, as before
        groups = {g.group: g for g in reversed(status.job_groups)}
        _INDEXED[:] = [(status, jobs, groups)]
    return _INDEXED[0][1], _INDEXED[0][2]


def _served_by_row(table: DispatchTable | None) -> list[set[int]]:
    """Per signature, the job indices the table lists (any tier)."""
    if table is None or table.counts.size == 0:
        return []
    out: list[set[int]] = []
    for sig in range(table.counts.shape[0]):
        listed: set[int] = set()
        for tier in range(table.counts.shape[1]):
            n = int(table.counts[sig, tier])
            listed.update(int(j) for j in table.candidates[sig, tier, :n] if j >= 0)
        out.append(listed)
    return out


def scheduler_status(
    core: Scheduler,
    table: DispatchTable | None,
    now: float,
    worker: str,
    policy: str,
    mix: AttributeMix | None = None,
    estimates: Mapping[str, Band] | None = None,
) -> SchedulerStatus:
    """The snapshot of ``core`` with ``table``, its current dispatch table (None: no job is
    counted as served). The supply mix is ``mix``'s, the attribute sets devices reported;
    without it, the core's slots' (a device profile each in the simulator). ``estimates``:
    each job's completion band if the caller has them (None: made here)."""
    index = core.index
    sig_matrix = index.signature_matrix  # [signatures, groups]
    num_sigs, num_groups = int(sig_matrix.shape[0]), index.num_groups
    counts = core.signature_counts()[:num_sigs].round().astype(np.int64)
    rate = core.supply.rate_per_s()
    total = int(counts.sum())
    share = counts / total if total else np.zeros(num_sigs)
    rows = _served_by_row(table)
    by_idx = core.by_idx
    feeds: list[list[int]] = []
    for sig in range(num_sigs):
        listed = rows[sig] if sig < len(rows) else set()
        feeds.append(sorted({by_idx[j].group for j in listed if j < len(by_idx)}))
    served = set().union(*rows) if rows else set()
    device_groups = [
        DeviceGroup(
            signature=sig,
            eligible_groups=[int(g) for g in np.flatnonzero(sig_matrix[sig])],
            checkins_in_window=int(counts[sig]),
            checkin_rate_per_s=round(float(rate * share[sig]), 4),
            feeds=feeds[sig],
        )
        for sig in range(num_sigs)
    ]
    open_by_group: dict[int, list[str]] = {}
    placements = []
    waste = waste_factor(core)
    loads = {load.job_id: load for load in job_loads(core, waste)}
    if estimates is None:
        estimates = scheduler_bands(core, now)
    for js in core.jobs.values():
        if js.finished:
            continue
        open_round = js.round_open and js.remaining > 0
        if open_round:
            open_by_group.setdefault(js.group, []).append(js.spec.job_id)
        load = loads[js.spec.job_id]
        band = estimates.get(js.spec.job_id)
        end = band.p50 if band is not None else math.inf
        late = band.p90 if band is not None else math.inf
        placements.append(
            JobPlacement(
                js.spec.job_id,
                js.group,
                open_round,
                js.remaining,
                js.idx in served,
                estimated_finish=round(end, 3) if math.isfinite(end) else None,
                estimated_finish_p90=round(late, 3) if math.isfinite(late) else None,
                work=load.work,
                latency_s=round(load.latency_s, 3),
                demand=load.demand,
                needed=load.needed,
                deadline_s=load.deadline_s,
            )
        )
    if mix is not None:
        supply_mix = [SlotSupply(attrs, n) for attrs, n in mix.counts()]
    else:
        slot_counts = core.supply.slot_counts(index.num_slots)
        supply_mix = [
            SlotSupply(dict(index.attrs_of(slot)), round(float(slot_counts[slot])))
            for slot in np.flatnonzero(slot_counts > 0).tolist()
        ]
    job_groups = []
    for g in range(num_groups):
        eligible = sig_matrix[:, g] if num_sigs else np.zeros(0, dtype=bool)
        job_groups.append(
            JobGroup(
                group=g,
                requirement=index.requirements[g].as_dict(),
                open_jobs=sorted(open_by_group.get(g, [])),
                fed_by=[s for s in range(num_sigs) if g in feeds[s]],
                eligible_rate_per_s=round(float(rate * share[eligible].sum()), 4)
                if num_sigs
                else 0.0,
            )
        )
    return SchedulerStatus(
        time=now,
        worker=worker,
        policy=policy,
        window=total,
        checkin_rate_per_s=round(rate, 4),
        busy_devices=len(core.active_devices),
        device_groups=device_groups,
        job_groups=job_groups,
        jobs=placements,
        supply_mix=supply_mix,
        gateways=core.supply.sources() if isinstance(core.supply, ReportedSupply) else 0,
        arrivals=[
            ArrivalSeen(
                js.registered_at,
                js.group,
                js.spec.demand,
                js.spec.rounds,
                js.spec.results_needed,
                js.spec.deadline,
            )
            for js in core.by_idx[-ARRIVALS_KEPT:]
        ],
        waste=round(waste, 4),
    )


def wait_reason(status: SchedulerStatus, job_id: str) -> WaitReason | None:
    """Why an open round of ``job_id`` gets no device now (None: it is served, or the
    snapshot does not know the job's open round)."""
    placement = status.job(job_id)
    if placement is None or not placement.round_open or placement.served:
        return None
    group = status.group(placement.group)
    eligible = [d for d in status.device_groups if placement.group in d.eligible_groups]
    if group is None or not eligible or not any(d.checkins_in_window for d in eligible):
        return "no_eligible_supply"
    if not group.fed_by:
        return "group_starved"
    return "outranked"


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(SchedulerStatus)


def encode_status(status: SchedulerStatus) -> bytes:
    return _encoder.encode(status)


def decode_status(raw: bytes | None) -> SchedulerStatus:
    """The snapshot in ``raw``; `InvalidEvent` (only) if it is not one: what a bad record of
    venn.status is dead-lettered and skipped for."""
    if not raw:
        raise InvalidEvent("empty", "message has no value")
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise InvalidEvent("wrong_type", f"not a scheduler status ({exc})") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidEvent("not_json", f"not valid UTF-8 JSON ({exc})") from None
