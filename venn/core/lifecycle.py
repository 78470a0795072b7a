"""A job's life as its events tell it: one fold over venn.jobs and venn.rounds, with the
replay rules written once.

The rules of round attempts are ``venn.core.round_cursor``'s, shared with the core's
scheduler; this fold adds the rest of a job's life and keeps the events' content:

- the first registration counts; nothing reopens a job once it finished or was cancelled;
- the scheduler's verdict on that registration (a `JobAdmission` naming it) counts once: a
  refusal (a limit it would pass) ends the job as ``refused``;
- a round asks at most the demand its job was registered with;
- a second close of an attempt with the same event id, or with other ids but the same
  content, is a replay; one with other content is a *conflict*, kept apart so that it can
  be reported (it is never applied);
- the first finish, cancel or expiry ends the job;
- a heartbeat changes nothing but the time the job was last heard of.

Pure: no I/O, no clock. Coordinators rebuild a job's position from it after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from venn import events as ev
from venn.core.round_cursor import Applied, RoundCursor

__all__ = ["Applied", "Attempt", "JobBook", "JobLife", "JobStatus"]

JobStatus = Literal[
    "queued", "refused", "submitted", "running", "finished", "failed", "cancelled", "expired"
]
"""queued: submitted and held by admission until a limit or the supply allows it;
refused: its last submission was refused (not registered); submitted: registered, no
round yet; running: a round requested; finished: its rounds
done; failed: finished with fewer successful rounds than asked (its coordinator gave up);
cancelled: by its owner; expired: dropped by the scheduler after its coordinator fell
silent."""


@dataclass
class Attempt:
    """One round attempt: requested (if the request was seen) and maybe closed."""

    index: int
    demand: int = 0
    requested_at: float | None = None
    closed: ev.RoundClosed | None = None


@dataclass
class JobLife:
    job_id: str
    registered: ev.JobRegistered | None = None
    attempts: dict[int, Attempt] = field(default_factory=dict)
    finished: ev.JobFinished | None = None
    cancelled: ev.JobCancelled | None = None
    expired: ev.JobExpired | None = None
    conflicts: list[ev.RoundClosed] = field(default_factory=list)
    rounds: RoundCursor = field(default_factory=RoundCursor)
    last_seen: float = 0.0
    """Time of the latest event of the job (its coordinator's last sign of life)."""
    admission: ev.JobAdmission | None = None
    """The latest admission decision on a submission of the job id."""
    queued: ev.JobAdmission | None = None
    """The decision that queued it, while it waits (its spec), kept once it is admitted."""
    verdict: ev.JobAdmission | None = None
    """The scheduler's verdict on its registration (None: not read yet)."""

    # -- the fold ----------------------------------------------------------------------
    def apply(self, event: ev.Event) -> Applied:
        if getattr(event, "job_id", None) != self.job_id:
            return Applied.IGNORED
        if not isinstance(event, ev.JobExpired):
            self.last_seen = max(self.last_seen, event.time)
        if isinstance(event, ev.JobHeartbeat):
            return Applied.STALE if self.ended else Applied.CHANGED
        if isinstance(event, ev.JobAdmission):
            if event.registration is not None:
                return self._judged(event)
            return self._admit(event)
        if isinstance(event, ev.JobRegistered):
            if self.registered is not None:
                return Applied.REPLAY
            self.registered = event
            return Applied.CHANGED
        if isinstance(event, ev.RoundRequested):
            return self._request(event)
        if isinstance(event, ev.RoundClosed):
            return self._close(event)
        if isinstance(event, ev.JobFinished | ev.JobCancelled | ev.JobExpired):
            if self.rounds.end() is not Applied.CHANGED:
                ended = self.finished or self.cancelled or self.expired
                return Applied.REPLAY if ended == event else Applied.STALE
            if isinstance(event, ev.JobFinished):
                self.finished = event
            elif isinstance(event, ev.JobCancelled):
                self.cancelled = event
            else:
                self.expired = event
            return Applied.CHANGED
        return Applied.IGNORED

    def _admit(self, event: ev.JobAdmission) -> Applied:
        if self.admission == event:
            return Applied.REPLAY
        if self.registered is not None and event.decision != "admitted":
            return Applied.STALE  # a decision on a submission after the one registered
        self.admission = event
        if event.decision == "queued" and self.queued is None:
            self.queued = event
        return Applied.CHANGED

    def _judged(self, event: ev.JobAdmission) -> Applied:
        reg = self.registered
        if self.verdict is not None:
            return Applied.REPLAY if self.verdict.decision == event.decision else Applied.STALE
        if reg is None or reg.event_id != event.registration:
            return Applied.STALE  # not on the registration this fold took
        self.verdict = event
        if event.decision == "refused":
            self.admission = event
            self.rounds.end()
        return Applied.CHANGED

    @property
    def refused(self) -> bool:
        """Its registration was refused by the scheduler (a limit it would pass)."""
        return self.verdict is not None and self.verdict.decision == "refused"

    @property
    def waiting_admission(self) -> bool:
        """Queued and neither registered nor cancelled yet."""
        return (
            self.queued is not None
            and self.registered is None
            and self.cancelled is None
            and self.admission is not None
            and self.admission.decision == "queued"
        )

    def _request(self, event: ev.RoundRequested) -> Applied:
        applied = self.rounds.request(event.round_index)
        if applied is Applied.CHANGED:
            attempt = self.attempts.setdefault(event.round_index, Attempt(event.round_index))
            demand = event.demand
            if self.registered is not None:
                demand = min(demand, self.registered.demand)
            attempt.requested_at, attempt.demand = event.time, demand
        return applied

    def _close(self, event: ev.RoundClosed) -> Applied:
        if self.rounds.close(event.round_index) is Applied.CHANGED:
            attempt = self.attempts.setdefault(event.round_index, Attempt(event.round_index))
            attempt.closed = event
            attempt.demand = attempt.demand or event.demand
            return Applied.CHANGED
        known = self.attempts.get(event.round_index)
        first = known.closed if known is not None else None
        if first is None or first.event_id == event.event_id or _same_close(first, event):
            return Applied.REPLAY
        self.conflicts.append(event)
        return Applied.CONFLICT

    # -- what it says ------------------------------------------------------------------
    @property
    def ended(self) -> bool:
        return self.rounds.ended

    @property
    def status(self) -> JobStatus:
        if self.finished is not None:
            asked = self.registered.rounds if self.registered is not None else 0
            return "failed" if self.finished.rounds_completed < asked else "finished"
        if self.cancelled is not None:
            return "cancelled"
        if self.expired is not None:
            return "expired"
        if self.refused:
            return "refused"
        if self.registered is None and self.admission is not None:
            return "refused" if self.admission.decision == "refused" else "queued"
        return "running" if self.attempts else "submitted"

    @property
    def last_index(self) -> int:
        """The highest attempt index seen (-1: none)."""
        return self.rounds.last

    @property
    def next_index(self) -> int:
        """The index the job's next round request must carry."""
        return self.last_index + 1

    @property
    def rounds_done(self) -> int:
        return sum(
            a.closed is not None and a.closed.outcome == "succeeded" for a in self.attempts.values()
        )

    @property
    def closes(self) -> list[ev.RoundClosed]:
        return [a.closed for _, a in sorted(self.attempts.items()) if a.closed is not None]

    @property
    def open_attempt(self) -> Attempt | None:
        """The attempt requested and not closed yet (only the last one can be)."""
        index = self.rounds.open_index
        return None if index is None else self.attempts[index]


def _same_close(a: ev.RoundClosed, b: ev.RoundClosed) -> bool:
    """Equal but for the event id and stamp: a close sent twice by a retrying client."""
    keep = ("outcome", "demand", "assigned", "results", "opened_at", "closed_at", "reason")
    return all(getattr(a, name) == getattr(b, name) for name in keep)


@dataclass
class JobBook:
    """The lives of many jobs: the fold over whole topics."""

    jobs: dict[str, JobLife] = field(default_factory=dict)

    def apply(self, event: ev.Event) -> Applied:
        job_id = getattr(event, "job_id", None)
        if not isinstance(job_id, str):
            return Applied.IGNORED
        life = self.jobs.get(job_id)
        if life is None:
            life = self.jobs[job_id] = JobLife(job_id)
        return life.apply(event)

    def get(self, job_id: str) -> JobLife:
        return self.jobs.get(job_id) or JobLife(job_id)
