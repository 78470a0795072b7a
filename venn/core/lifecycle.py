"""A job's life as its events tell it: one fold over venn.jobs and venn.rounds, with the
replay rules written once.

Events arrive at least once and, across the two topics, in any order; the rules make the
fold give the same answer whatever the duplicates:

- the first registration counts; nothing reopens a job once it finished or was cancelled;
- a round request opens attempt ``i`` only when ``i`` is above every attempt seen so far
  (a failed round's retry is a new, higher index), so a replayed or stale request is
  ignored;
- the first close of an attempt counts. A second close with the same event id is a
  replay; one with another event id and other content is a *conflict*, kept apart so that
  it can be reported (it is never applied);
- the first finish, cancel or expiry ends the job;
- a heartbeat changes nothing but the time the job was last heard of.

Pure: no I/O, no clock. Coordinators rebuild a job's position from it after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from venn import events as ev

JobStatus = Literal["submitted", "running", "finished", "failed", "cancelled", "expired"]
"""submitted: registered, no round yet; running: a round requested; finished: its rounds
done; failed: finished with fewer successful rounds than asked (its coordinator gave up);
cancelled: by its owner; expired: dropped by the scheduler after its coordinator fell
silent."""


class Applied(Enum):
    """What one event did to the fold."""

    CHANGED = "changed"
    REPLAY = "replay"  # already applied (the same event, or an equal one)
    STALE = "stale"  # superseded: an older attempt, or the job had ended
    CONFLICT = "conflict"  # a second, different close of an attempt
    IGNORED = "ignored"  # not an event of a job's life


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
    last_seen: float = 0.0
    """Time of the latest event of the job (its coordinator's last sign of life)."""

    # -- the fold ----------------------------------------------------------------------
    def apply(self, event: ev.Event) -> Applied:
        if getattr(event, "job_id", None) != self.job_id:
            return Applied.IGNORED
        if not isinstance(event, ev.JobExpired):
            self.last_seen = max(self.last_seen, event.time)
        if isinstance(event, ev.JobHeartbeat):
            return Applied.STALE if self.ended else Applied.CHANGED
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
            if self.ended:
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

    def _request(self, event: ev.RoundRequested) -> Applied:
        if self.ended:
            return Applied.STALE
        known = self.attempts.get(event.round_index)
        if known is not None:
            if known.requested_at is not None:
                return Applied.REPLAY
            # Its close came first (another topic): the request completes the attempt.
            known.requested_at, known.demand = event.time, event.demand
            return Applied.CHANGED
        if event.round_index <= self.last_index:
            return Applied.STALE
        self.attempts[event.round_index] = Attempt(event.round_index, event.demand, event.time)
        return Applied.CHANGED

    def _close(self, event: ev.RoundClosed) -> Applied:
        attempt = self.attempts.setdefault(event.round_index, Attempt(event.round_index))
        first = attempt.closed
        if first is None:
            attempt.closed = event
            attempt.demand = attempt.demand or event.demand
            return Applied.CHANGED
        if first.event_id == event.event_id or _same_close(first, event):
            return Applied.REPLAY
        self.conflicts.append(event)
        return Applied.CONFLICT

    # -- what it says ------------------------------------------------------------------
    @property
    def ended(self) -> bool:
        return any(e is not None for e in (self.finished, self.cancelled, self.expired))

    @property
    def status(self) -> JobStatus:
        if self.finished is not None:
            asked = self.registered.rounds if self.registered is not None else 0
            return "failed" if self.finished.rounds_completed < asked else "finished"
        if self.cancelled is not None:
            return "cancelled"
        if self.expired is not None:
            return "expired"
        return "running" if self.attempts else "submitted"

    @property
    def last_index(self) -> int:
        """The highest attempt index seen (-1: none)."""
        return max(self.attempts, default=-1)

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
        if self.ended or not self.attempts:
            return None
        last = self.attempts[self.last_index]
        return last if last.closed is None and last.requested_at is not None else None


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
