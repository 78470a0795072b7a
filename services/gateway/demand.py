"""The gateway's own view of open demand, to answer "no assignment" without waiting.

The scheduler publishes an Assignment only when it assigns; a check-in it does not assign
is silent, so without more information the gateway learns "no" only by timing out. This
view follows venn.jobs (registrations, round requests, cancels), venn.rounds (round
closed, job finished) and venn.assignments (demand used) and answers one question:
could any open round with remaining demand take a device with these attributes?

It only errs on the safe side, except for one race: assignments are read from the latest
offset (so used demand is under-counted and "maybe" is said too often, which only costs
a wait), duplicates are counted once (per device); but a round opened a few milliseconds
ago and not yet seen here yields a "no". Such a check-in still counts as supply: the gateway
reports it (`services.gateway.forwarding.SupplyCounter`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping

from venn import events as ev
from venn.core.lifecycle import Applied, JobBook, JobLife
from venn.core.model import Requirement
from venn.core.round_tally import RoundTally

RECENT_ENDED = 500
"""Ended (or refused) jobs the listings keep (the newest): older ones stay readable one by
one (`job`), and in the audit database."""


class DemandView:
    """Open rounds and their remaining demand: the core's lifecycle fold over venn.jobs and
    venn.rounds and its tally of each open round's assignments (their replay rules, not a
    copy of them).

    Indexed by state as events apply, so that what a request or a check-in reads grows with
    the live jobs, never with every job the log ever held (issue 34, item 2): the jobs
    registered and not ended (``unended``, bounded by VENN_MAX_RUNNING_JOBS), those waiting
    in the admission queue (``waiting``, bounded by VENN_MAX_QUEUED_JOBS), the newest
    ended ones, and a count of jobs per state."""

    def __init__(self) -> None:
        self.book = JobBook()
        self.unended: dict[str, JobLife] = {}
        self.waiting: dict[str, JobLife] = {}
        self.ended: OrderedDict[str, JobLife] = OrderedDict()
        self.states: dict[str, int] = {}
        """Jobs per state (`JobLife.status`), of every job the view holds."""
        self._state: dict[str, str] = {}
        self.tallies: dict[str, RoundTally] = {}
        """Job -> the tally of its open attempt (of the assignments seen)."""
        self._open: tuple[Requirement, ...] | None = None
        self._demand: dict[Requirement, int] | None = None
        self.assignments_seen = 0
        """Assignments read since the gateway started (the dashboard's assignment rate)."""

    def apply(self, event: ev.Event) -> None:
        """Fold one event of venn.jobs, venn.rounds or venn.assignments into the view."""
        assignments = ev.assignments_of(event)
        if assignments:
            self.assignments_seen += len(assignments)
            for a in assignments:
                tally = self._tally(self.book.get(a.job_id))
                if tally is None:
                    continue
                self._demand = None  # its remaining demand changed
                if tally.on_assignment(a, a.time):
                    self._open = None
            return
        if self.book.apply(event) is Applied.CHANGED:
            self._open = self._demand = None
            job_id = getattr(event, "job_id", None)
            if isinstance(job_id, str):
                self._index(self.book.jobs[job_id])

    def _index(self, life: JobLife) -> None:
        """File ``life`` under its state now."""
        job_id = life.job_id
        if life.registered is not None and not life.ended:
            self.unended[job_id] = life
        else:
            self.unended.pop(job_id, None)
        if life.waiting_admission:
            self.waiting[job_id] = life
        else:
            self.waiting.pop(job_id, None)
        if life.ended or life.status == "refused":
            self.ended[job_id] = life
            self.ended.move_to_end(job_id)
            while len(self.ended) > RECENT_ENDED:
                self.ended.popitem(last=False)
        status = life.status
        before = self._state.get(job_id)
        if before != status:
            if before is not None:
                self.states[before] -= 1
            self.states[status] = self.states.get(status, 0) + 1
            self._state[job_id] = status

    def listed(self, max_ended: int | None = None) -> Iterator[JobLife]:
        """The jobs a listing shows: every one registered and not ended, every one queued,
        and the newest RECENT_ENDED (or ``max_ended``) ended or refused."""
        yield from self.unended.values()
        yield from self.waiting.values()
        ended = list(self.ended.values())
        if max_ended is not None:
            ended = ended[len(ended) - max_ended :] if max_ended else []
        yield from (life for life in ended if life.job_id not in self.unended)

    def _tally(self, life: JobLife) -> RoundTally | None:
        attempt = life.open_attempt
        if attempt is None or life.registered is None:
            self.tallies.pop(life.job_id, None)
            return None
        tally = self.tallies.get(life.job_id)
        if tally is None or tally.round_index != attempt.index:
            tally = self.tallies[life.job_id] = RoundTally(attempt.index, attempt.demand)
        return tally

    def remaining(self, life: JobLife) -> int:
        tally = self._tally(life)
        return 0 if tally is None else tally.remaining

    def assigned(self, life: JobLife) -> int:
        """Devices seen assigned to the job's open attempt."""
        tally = self._tally(life)
        return 0 if tally is None else len(tally.assigned)

    def job(self, job_id: str) -> JobLife | None:
        """The job's lifecycle, None unless its registration was read."""
        life = self.book.jobs.get(job_id)
        return life if life is not None and life.registered is not None else None

    def is_open(self, job_id: str) -> bool:
        return self.remaining(self.book.get(job_id)) > 0

    def __len__(self) -> int:
        return len(self.book.jobs)

    def open_requirements(self) -> tuple[Requirement, ...]:
        """Distinct requirements of the rounds that are open with demand left."""
        if self._open is None:
            self._open = tuple(
                {
                    Requirement.of(life.registered.requirement)
                    for life in self.unended.values()
                    if life.registered is not None and self.remaining(life) > 0
                }
            )
        return self._open

    def open_demand(self) -> dict[Requirement, int]:
        """Remaining demand of the open rounds, summed per requirement."""
        if self._demand is None:
            demand: dict[Requirement, int] = {}
            for life in self.unended.values():
                left = self.remaining(life) if life.registered is not None else 0
                if left > 0:
                    r = Requirement.of(life.registered.requirement)  # type: ignore[union-attr]
                    demand[r] = demand.get(r, 0) + left
            self._demand = demand
        return self._demand

    def may_assign(self, attrs: Mapping[str, float]) -> bool:
        return any(r.admits(attrs) for r in self.open_requirements())
