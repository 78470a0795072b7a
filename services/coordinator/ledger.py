"""One round attempt's bookkeeping: who was assigned, who answered, when it filled.

Pure (no I/O, no clock): the caller passes trace times in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from venn.events import Assignment, DeviceResult


@dataclass
class RoundLedger:
    job_id: str
    round_index: int
    demand: int
    needed: int
    opened_at: float
    assigned: dict[str, float] = field(default_factory=dict)
    """device_id -> trace time of its assignment."""
    extra_assignments: int = 0
    """Assignments beyond the demand (the scheduler must never make any)."""
    ok: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)
    filled_at: float | None = None
    last_assigned_at: float | None = None

    def on_assignment(self, a: Assignment, now: float) -> bool:
        """Account an assignment of this round; False if it is not new."""
        if a.round_index != self.round_index or a.device_id in self.assigned:
            return False
        self.assigned[a.device_id] = now
        self.last_assigned_at = now
        if len(self.assigned) > self.demand:
            self.extra_assignments += 1
        if self.filled_at is None and len(self.assigned) >= self.demand:
            self.filled_at = now
        return True

    def on_result(self, r: DeviceResult) -> bool:
        """Account a device's result of this round; False if stale or a duplicate."""
        if r.round_index != self.round_index or r.device_id in self.ok:
            return False
        if r.ok:
            self.failed.pop(r.device_id, None)
            self.ok.add(r.device_id)
        elif r.device_id not in self.failed:
            self.failed[r.device_id] = r.reason or "failed"
        else:
            return False
        return True

    @property
    def succeeded(self) -> bool:
        return len(self.ok) >= self.needed

    def closing(self, now: float) -> dict[str, Any]:
        """The RoundClosed fields (minus job_id/round_index) for a close at ``now``."""
        outcome: Literal["succeeded", "failed"] = "succeeded" if self.succeeded else "failed"
        reason = "" if self.succeeded else f"deadline: {len(self.ok)}/{self.needed} results"
        filled = self.filled_at if self.filled_at is not None else now
        dispatch_end = self.filled_at or self.last_assigned_at or now
        return {
            "outcome": outcome,
            "demand": self.demand,
            "assigned": len(self.assigned),
            "results": len(self.ok),
            "opened_at": self.opened_at,
            "closed_at": now,
            "reason": reason,
            "sched_delay_s": max(0.0, filled - self.opened_at),
            "response_time_s": max(0.0, now - dispatch_end),
        }
