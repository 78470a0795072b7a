"""The gateway's own view of open demand, to answer "no assignment" without waiting.

The scheduler publishes an Assignment only when it assigns; a check-in it does not assign
is silent, so without more information the gateway learns "no" only by timing out. This
view follows venn.jobs (registrations, round requests, cancels), venn.rounds (round
closed, job finished) and venn.assignments (demand used) and answers one question:
could any open round with remaining demand take a device with these attributes?

It only errs on the safe side, except for one race: assignments are read from the latest
offset (so used demand is under-counted and "maybe" is said too often, which only costs
a wait), duplicates are counted once; but a round opened a few milliseconds ago and not
yet seen here yields a "no". Such a check-in goes to the scheduler marked ``observe_only``:
it counts as supply for the plan and is never assigned, so no slot is spent on a device
that was sent away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from venn import events as ev
from venn.core.model import Requirement


@dataclass
class _Job:
    requirement: Requirement
    round_index: int = -1
    remaining: int = 0
    open: bool = False
    seen: set[str] = field(default_factory=set)


class DemandView:
    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}
        self.removed: set[str] = set()
        self._open: tuple[Requirement, ...] | None = None

    def apply(self, event: ev.Event) -> None:
        """Fold one event of venn.jobs, venn.rounds or venn.assignments into the view."""
        if isinstance(event, ev.AssignmentBatch):
            for assignment in ev.assignments_of(event):
                self.apply(assignment)
            return
        if isinstance(event, ev.JobRegistered):
            if event.job_id not in self.jobs and event.job_id not in self.removed:
                self.jobs[event.job_id] = _Job(Requirement.of(event.requirement))
            return
        if isinstance(event, ev.JobCancelled | ev.JobFinished):
            self.removed.add(event.job_id)
            if self.jobs.pop(event.job_id, None) is not None:
                self._open = None
            return
        job = self.jobs.get(getattr(event, "job_id", ""))
        if job is None:
            return
        if isinstance(event, ev.RoundRequested):
            # Round indices only grow (a failed round's retry is a new index): an equal
            # or smaller one is a replay.
            if event.round_index > job.round_index:
                job.round_index = event.round_index
                job.remaining = event.demand
                job.open = True
                job.seen = set()
                self._open = None
        elif isinstance(event, ev.RoundClosed):
            if event.round_index >= job.round_index and job.open:
                job.round_index = event.round_index
                job.open = False
                self._open = None
        elif (
            isinstance(event, ev.Assignment)
            and job.open
            and event.round_index == job.round_index
            and event.event_id not in job.seen
        ):
            job.seen.add(event.event_id)
            job.remaining -= 1
            if job.remaining <= 0:
                self._open = None

    def open_requirements(self) -> tuple[Requirement, ...]:
        """Distinct requirements of the rounds that are open with demand left."""
        if self._open is None:
            self._open = tuple(
                {j.requirement for j in self.jobs.values() if j.open and j.remaining > 0}
            )
        return self._open

    def may_assign(self, attrs: Mapping[str, float]) -> bool:
        return any(r.admits(attrs) for r in self.open_requirements())
