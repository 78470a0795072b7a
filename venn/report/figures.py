"""Report figures from audit rows: pure functions over `JobAudit` and `RoundAudit` values.

The rows may come from a database session or be built by hand (`JobAudit(**row)`); nothing
here touches a database. Times are seconds on the pipeline's clock (trace seconds under
`venn demo`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from venn.audit.models import JobAudit, RoundAudit
from venn.core.model import Requirement
from venn.workloads import TIER_NAMES, tier_requirements

UNKNOWN_TIER = "unknown"
NO_REASON = "unspecified"


@dataclass(frozen=True, order=True)
class Tier:
    """A requirement tier as the report names it. `rank` orders the paper's tiers (1-4)
    first, then other requirements by label, then jobs whose requirement is unknown."""

    rank: int
    label: str


def paper_tiers() -> dict[Requirement, int]:
    """The paper's four requirement tiers (the ones every packaged workload uses)."""
    return {req: tier for tier, req in tier_requirements().items()}


def tier_of(
    requirement: Mapping[str, float] | None, tiers: Mapping[Requirement, int] | None = None
) -> Tier:
    """The tier of a job's recorded requirement: one of `tiers` (default: the paper's four)
    when it equals one, else the requirement itself as the label."""
    if requirement is None:
        return Tier(10_000, UNKNOWN_TIER)
    req = Requirement.of(requirement)
    number = (paper_tiers() if tiers is None else tiers).get(req)
    if number is None:
        return Tier(1_000, str(req))
    return Tier(number, f"tier {number} ({TIER_NAMES.get(number, str(req))})")


def reason_kind(reason: str) -> str:
    """The kind of a failed round's reason: the text before ':' ("deadline: 3/8 results"
    -> "deadline")."""
    kind = reason.split(":", 1)[0].strip()
    return kind or NO_REASON


@dataclass(frozen=True)
class Stats:
    """Count, mean, median, 90th percentile and maximum of some values (None when empty)."""

    count: int
    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Stats:
        data = np.array([v for v in values if v is not None], dtype=np.float64)
        if data.size == 0:
            return cls(0)
        return cls(
            count=int(data.size),
            mean=float(data.mean()),
            median=float(np.median(data)),
            p90=float(np.percentile(data, 90)),
            max=float(data.max()),
        )


@dataclass(frozen=True)
class JobFigures:
    """One job: its tier, state, JCT, round attempts and mean per-round times."""

    job_id: str
    tier: str
    status: str  # finished | cancelled | unfinished | unrecorded (rounds but no job row)
    demand: int | None
    rounds: int | None  # rounds the job asked for
    rounds_completed: int | None
    attempts: int  # round rows (a failed round and its retry are two attempts)
    failed_rounds: int
    jct_s: float | None
    sched_delay_s: float | None  # mean over its rounds
    response_time_s: float | None  # mean over its rounds


@dataclass(frozen=True)
class TierFigures:
    """The jobs of one tier together."""

    tier: str
    jobs: int
    finished: int
    jct: Stats  # finished jobs
    attempts: int
    failed_rounds: int
    sched_delay: Stats  # per round
    response_time: Stats  # per round


@dataclass(frozen=True)
class DelayFigures:
    """Scheduling delay (round opened -> demand assigned) against response time (assigned
    -> closed), per round: which of the two a round's duration is made of."""

    sched_delay: Stats
    response_time: Stats
    rounds: int  # rounds with both times recorded
    response_dominated: int  # of those, rounds whose response time exceeds their delay

    @property
    def response_dominated_share(self) -> float | None:
        return self.response_dominated / self.rounds if self.rounds else None


@dataclass(frozen=True)
class Report:
    """Everything `venn report` writes, computed from the audit rows."""

    jobs_total: int
    jobs_finished: int
    jobs_cancelled: int
    jobs_unfinished: int  # not ended (still running, or lost)
    jobs_failed: int  # finished with fewer successful rounds than asked
    jobs_expired: int  # dropped after their coordinator fell silent
    jct: Stats  # finished jobs
    rounds_total: int
    rounds_succeeded: int
    rounds_failed: int
    failed_by_reason: dict[str, int]
    delay: DelayFigures
    jobs: list[JobFigures] = field(default_factory=list)
    tiers: list[TierFigures] = field(default_factory=list)


def _mean(values: Iterable[float | None]) -> float | None:
    return Stats.of(values).mean


def failed_by_reason(rounds: Iterable[RoundAudit]) -> dict[str, int]:
    """Failed rounds counted by reason kind, most frequent first."""
    counts = Counter(reason_kind(r.reason or "") for r in rounds if r.outcome == "failed")
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def delay_figures(rounds: Iterable[RoundAudit]) -> DelayFigures:
    """Scheduling delay and response time over `rounds`."""
    rounds = list(rounds)
    both = [
        (r.sched_delay_s, r.response_time_s)
        for r in rounds
        if r.sched_delay_s is not None and r.response_time_s is not None
    ]
    return DelayFigures(
        sched_delay=Stats.of(r.sched_delay_s for r in rounds),
        response_time=Stats.of(r.response_time_s for r in rounds),
        rounds=len(both),
        response_dominated=sum(response > delay for delay, response in both),
    )


UNENDED = ("submitted", "unknown")
ENDED_WITH_JCT = ("finished", "failed")


def _job_status(job: JobAudit | None) -> str:
    if job is None:
        return "unrecorded"
    # A job that has not ended (finished, failed, cancelled, expired) is running or lost.
    return "unfinished" if job.status in UNENDED else job.status


def job_figures(
    jobs: Sequence[JobAudit],
    rounds: Sequence[RoundAudit],
    tiers: Mapping[Requirement, int] | None = None,
) -> list[JobFigures]:
    """One entry per job id of either table, in job id order."""
    by_id = {j.job_id: j for j in jobs}
    rounds_of: dict[str, list[RoundAudit]] = defaultdict(list)
    for r in rounds:
        rounds_of[r.job_id].append(r)
    known = paper_tiers() if tiers is None else tiers
    out = []
    for job_id in sorted(by_id.keys() | rounds_of.keys()):
        job, mine = by_id.get(job_id), rounds_of.get(job_id, [])
        out.append(
            JobFigures(
                job_id=job_id,
                tier=tier_of(job.requirement if job else None, known).label,
                status=_job_status(job),
                demand=job.demand if job else None,
                rounds=job.rounds if job else None,
                rounds_completed=job.rounds_completed if job else None,
                attempts=len(mine),
                failed_rounds=sum(r.outcome == "failed" for r in mine),
                jct_s=job.jct_s if job else None,
                sched_delay_s=_mean(r.sched_delay_s for r in mine),
                response_time_s=_mean(r.response_time_s for r in mine),
            )
        )
    return out


def tier_figures(
    jobs: Sequence[JobAudit],
    rounds: Sequence[RoundAudit],
    tiers: Mapping[Requirement, int] | None = None,
) -> list[TierFigures]:
    """Per-tier figures, the paper's tiers first. Rounds of a job without a job row count
    under the unknown tier."""
    known = paper_tiers() if tiers is None else tiers
    tier_by_job = {j.job_id: tier_of(j.requirement, known) for j in jobs}
    unknown = tier_of(None)
    jobs_in: dict[Tier, list[JobAudit]] = defaultdict(list)
    rounds_in: dict[Tier, list[RoundAudit]] = defaultdict(list)
    for j in jobs:
        jobs_in[tier_by_job[j.job_id]].append(j)
    for r in rounds:
        rounds_in[tier_by_job.get(r.job_id, unknown)].append(r)
    out = []
    for tier in sorted(jobs_in.keys() | rounds_in.keys()):
        mine, closes = jobs_in.get(tier, []), rounds_in.get(tier, [])
        out.append(
            TierFigures(
                tier=tier.label,
                jobs=len(mine),
                finished=sum(j.status in ENDED_WITH_JCT for j in mine),
                jct=Stats.of(j.jct_s for j in mine if j.status in ENDED_WITH_JCT),
                attempts=len(closes),
                failed_rounds=sum(r.outcome == "failed" for r in closes),
                sched_delay=Stats.of(r.sched_delay_s for r in closes),
                response_time=Stats.of(r.response_time_s for r in closes),
            )
        )
    return out


def build_report(
    jobs: Sequence[JobAudit],
    rounds: Sequence[RoundAudit],
    tiers: Mapping[Requirement, int] | None = None,
) -> Report:
    """All report figures from the rows of job_audit and round_audit."""
    known = paper_tiers() if tiers is None else tiers
    statuses = Counter(j.status for j in jobs)
    return Report(
        jobs_total=len(jobs),
        jobs_finished=statuses["finished"],
        jobs_cancelled=statuses["cancelled"],
        jobs_unfinished=sum(statuses[s] for s in UNENDED),
        jobs_failed=statuses["failed"],
        jobs_expired=statuses["expired"],
        jct=Stats.of(j.jct_s for j in jobs if j.status in ENDED_WITH_JCT),
        rounds_total=len(rounds),
        rounds_succeeded=sum(r.outcome == "succeeded" for r in rounds),
        rounds_failed=sum(r.outcome == "failed" for r in rounds),
        failed_by_reason=failed_by_reason(rounds),
        delay=delay_figures(rounds),
        jobs=job_figures(jobs, rounds, known),
        tiers=tier_figures(jobs, rounds, known),
    )
