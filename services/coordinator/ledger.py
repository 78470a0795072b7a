"""The coordinator's record of the round attempt it runs: the core's tally of its
assignments and results (`venn.core.round_tally`), and what the coordinator decides from
it: whether the round succeeded, and the close it sends.

Pure (no I/O, no clock): the caller passes trace times in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from venn.core.round_tally import RoundTally


@dataclass
class RoundLedger:
    job_id: str
    tally: RoundTally
    needed: int
    """Good results that make the round succeed."""
    opened_at: float

    @property
    def round_index(self) -> int:
        return self.tally.round_index

    @property
    def succeeded(self) -> bool:
        return len(self.tally.ok) >= self.needed

    def closing(self, now: float) -> dict[str, Any]:
        """The RoundClosed fields (minus job_id/round_index) for a close at ``now``."""
        t = self.tally
        outcome: Literal["succeeded", "failed"] = "succeeded" if self.succeeded else "failed"
        reason = "" if self.succeeded else f"deadline: {len(t.ok)}/{self.needed} results"
        filled = t.filled_at if t.filled_at is not None else now
        dispatch_end = t.filled_at or t.last_assigned_at or now
        return {
            "outcome": outcome,
            "demand": t.demand,
            "assigned": len(t.assigned),
            "results": len(t.ok),
            "opened_at": self.opened_at,
            "closed_at": now,
            "reason": reason,
            "sched_delay_s": max(0.0, filled - self.opened_at),
            "response_time_s": max(0.0, now - dispatch_end),
        }
