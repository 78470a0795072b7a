"""What the live dashboard shows: one JSON snapshot built from the gateway's views.

Everything here is pure (no I/O; ``now`` is given): the snapshot, the assignment-rate
meter and the tally of dead letters are fed by `services.gateway.dashboard`, which only
wires them to Kafka and to the event stream. The per-job rows, the plan and the supply are
the job API's own views (`services.gateway.job_view`), so the page and `venn job list`
never disagree.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from services.gateway.demand import DemandView
from services.gateway.job_view import job_list, plan_of, supply_of
from venn.core.status import SchedulerStatus
from venn.events import DeadLetter

Json = dict[str, Any]

MAX_ENDED_JOBS = 50
"""Ended jobs the snapshot lists (the newest); every job still running is listed."""
RECENT_DEAD_LETTERS = 10
REASON_CHARS = 120
"""A dead letter's reason is cut to this length on the page."""
RATE_WINDOW_S = 5.0
"""The assignment rate is taken over this many seconds of samples."""


@dataclass
class RateMeter:
    """A counter's rate per second from (time, total) samples over the last ``window_s``."""

    window_s: float = RATE_WINDOW_S
    samples: deque[tuple[float, int]] = field(default_factory=deque)

    def observe(self, now: float, total: int) -> None:
        """Add a sample; samples older than the window (but the newest such one, which
        anchors the rate) are dropped."""
        self.samples.append((now, total))
        while len(self.samples) > 2 and self.samples[1][0] <= now - self.window_s:
            self.samples.popleft()

    def rate(self) -> float:
        """Per second between the oldest and the newest sample (0 with fewer than two; a
        counter that went back, e.g. a restart, counts as no progress)."""
        if len(self.samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self.samples[0], self.samples[-1]
        if t1 <= t0:
            return 0.0
        return max(0.0, (v1 - v0) / (t1 - t0))


@dataclass
class DeadLetterTally:
    """Dead letters read from venn.dead-letters: a count per source topic and the latest
    few. A dead letter published twice (the same bad record re-processed: same event id)
    counts once."""

    total: int = 0
    unavailable: bool = False
    """The gateway may not read venn.dead-letters (its ACLs predate the dashboard)."""
    by_source: dict[str, int] = field(default_factory=dict)
    recent: deque[Json] = field(default_factory=lambda: deque(maxlen=RECENT_DEAD_LETTERS))
    _seen: set[str] = field(default_factory=set)

    def add(self, letter: DeadLetter) -> None:
        if letter.event_id in self._seen:
            return
        self._seen.add(letter.event_id)
        self.total += 1
        self.by_source[letter.source_topic] = self.by_source.get(letter.source_topic, 0) + 1
        self.recent.append(
            {
                "time": letter.time,
                "source_topic": letter.source_topic,
                "partition": letter.partition,
                "offset": letter.offset,
                "reason": letter.reason[:REASON_CHARS],
            }
        )

    def __contains__(self, event_id: object) -> bool:
        """Whether the dead letter with this event id was tallied."""
        return event_id in self._seen

    def as_json(self) -> Json:
        return {
            "available": not self.unavailable,
            "total": self.total,
            "by_source": dict(sorted(self.by_source.items())),
            "recent": list(reversed(self.recent)),  # newest first
        }


def _listed(jobs: list[Json], max_ended: int) -> list[Json]:
    """Jobs still running (all of them), then the newest ``max_ended`` ended ones."""
    # A refused submission never ran: it is listed with the ended jobs.
    running = [j for j in jobs if j["ended_at"] is None and j["state"] != "refused"]
    ended = [j for j in jobs if j["ended_at"] is not None or j["state"] == "refused"]
    ended = ended[:max_ended]
    return running + ended


def _with_elapsed(job: Json, now: float) -> Json:
    """The job's wall-clock time since it was registered: so far, or until it ended."""
    start = job["registered_at"]
    end = job["ended_at"] if job["ended_at"] is not None else now
    elapsed = round(max(0.0, end - start), 3) if start is not None else None
    return {**job, "elapsed_s": elapsed}


def open_demand(status: SchedulerStatus | None) -> list[Json]:
    """Per job group of the scheduler's snapshot: its open jobs and the devices their open
    rounds still need, with the check-in rate of devices eligible for it."""
    if status is None:
        return []
    remaining: dict[int, int] = {}
    for placement in status.jobs:
        if placement.round_open:
            remaining[placement.group] = remaining.get(placement.group, 0) + placement.remaining
    return [
        {
            "group": g.group,
            "requirement": g.requirement,
            "open_jobs": g.open_jobs,
            "open_demand": remaining.get(g.group, 0),
            "eligible_rate_per_s": g.eligible_rate_per_s,
            "fed_by": g.fed_by,
        }
        for g in status.job_groups
    ]


def dashboard_snapshot(
    view: DemandView,
    status: SchedulerStatus | None,
    now: float,
    *,
    assignments: RateMeter,
    dead_letters: DeadLetterTally,
    gateway: Json | None = None,
    max_ended: int = MAX_ENDED_JOBS,
) -> Json:
    """The page's whole state at ``now``: jobs and their rounds, open demand per job group,
    supply, the plan, assignments per second and dead letters. ``gateway`` is a few facts
    about the serving gateway (its id, whether its views are ready)."""
    jobs = job_list(view, status, now, max_ended)
    states = {state: n for state, n in view.states.items() if n}
    return {
        "time": now,
        "gateway": gateway or {},
        "jobs": [_with_elapsed(j, now) for j in _listed(jobs, max_ended)],
        "job_counts": {"total": sum(states.values()), **dict(sorted(states.items()))},
        "open_demand": open_demand(status),
        "supply": supply_of(status, now),
        "plan": plan_of(status, now),
        "assignments": {
            "seen": view.assignments_seen,
            "per_s": round(assignments.rate(), 3),
        },
        "dead_letters": dead_letters.as_json(),
    }
