"""One round attempt's use of its demand, as its assignments and results are read: who was
assigned, who answered, when it filled. The replay rules of those two event kinds, written
once for every reader that follows an open round from the log (the coordinator deciding
when a round is done, the gateway answering "no assignment" at once):

- an assignment counts once per device; one of another attempt does not count;
- a result counts only from a device this attempt assigned: any holder of a principal that
  writes venn.results (the devices', the gateway's) could send one for a device the round
  never had. One read before its device's assignment (the two come on different topics,
  in either order) is held, and counts when the assignment comes;
- a device's good result counts once and stands; a failure counts until a good result of
  the same device replaces it; a second failure counts nothing.

Pure: no I/O, no clock; the caller passes the times in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from venn.events import Assignment, DeviceResult

HELD_MIN = 1000
"""Results held for an assignment not seen yet: at least this many, or 2x the demand."""


@dataclass
class RoundTally:
    round_index: int
    demand: int
    assigned: dict[str, float] = field(default_factory=dict)
    """device_id -> when its assignment was read."""
    extra_assignments: int = 0
    """Assignments beyond the demand (the scheduler must never make any)."""
    ok: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)
    """device_id -> the reason it gave."""
    filled_at: float | None = None
    last_assigned_at: float | None = None
    held: dict[str, DeviceResult] = field(default_factory=dict)
    """device_id -> a result read before its assignment (a good one wins over a failure)."""
    unassigned_results: int = 0
    """Results that could not be held (too many from devices never assigned)."""

    def on_assignment(self, a: Assignment, now: float) -> bool:
        """Count an assignment of this attempt; False if it is not new."""
        if a.round_index != self.round_index or a.device_id in self.assigned:
            return False
        self.assigned[a.device_id] = now
        self.last_assigned_at = now
        if len(self.assigned) > self.demand:
            self.extra_assignments += 1
        if self.filled_at is None and len(self.assigned) >= self.demand:
            self.filled_at = now
        early = self.held.pop(a.device_id, None)
        if early is not None:
            self.on_result(early)
        return True

    def on_result(self, r: DeviceResult) -> bool:
        """Count a device's result of this attempt; False if stale, a duplicate, or from a
        device not (yet) assigned (then held until its assignment comes)."""
        if r.round_index != self.round_index or r.device_id in self.ok:
            return False
        if r.device_id not in self.assigned:
            self._hold(r)
            return False
        if r.ok:
            self.failed.pop(r.device_id, None)
            self.ok.add(r.device_id)
        elif r.device_id not in self.failed:
            self.failed[r.device_id] = r.reason or "failed"
        else:
            return False
        return True

    def _hold(self, r: DeviceResult) -> None:
        known = self.held.get(r.device_id)
        if known is not None:
            if r.ok and not known.ok:
                self.held[r.device_id] = r
        elif len(self.held) < max(HELD_MIN, 2 * self.demand):
            self.held[r.device_id] = r
        else:
            self.unassigned_results += 1

    @property
    def remaining(self) -> int:
        """Demand not yet met by an assignment."""
        return max(0, self.demand - len(self.assigned))
