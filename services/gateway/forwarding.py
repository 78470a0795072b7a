"""What a gateway forwards to the scheduler, and the supply it counts for it.

The scheduler's work grows with what it reads. A gateway answers at once every check-in
that no open round may take (no open round admits the device), and every one that would
only queue behind enough others (the check-ins it already has at the scheduler for each
admitting requirement reach ``multiple`` times that requirement's remaining demand); it
forwards the rest. Every check-in, forwarded or not, is counted per attribute set and
reported every interval as a ``SupplyReport``: the supply mix the scheduler plans with.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Mapping

from venn import events as ev
from venn.core.model import Requirement
from venn.fields import BATCH_MAX, DEMAND_MAX


class Verdict(enum.Enum):
    FORWARD = "forward"
    NO_OPEN_ROUND = "no_open_round"
    ENOUGH_IN_FLIGHT = "enough_in_flight"


class ForwardQuota:
    """Per requirement, how many forwarded check-ins await the scheduler's answer."""

    def __init__(self, multiple: float) -> None:
        if multiple <= 0:
            raise ValueError("multiple must be > 0")
        self.multiple = multiple
        self.in_flight: dict[Requirement, int] = {}

    def verdict(
        self, attrs: Mapping[str, float], open_demand: Mapping[Requirement, int]
    ) -> tuple[Verdict, tuple[Requirement, ...]]:
        """Forward or answer now; with FORWARD, the requirements to charge (every open
        one that admits the device: the scheduler may assign it to any of them)."""
        admitting = tuple(r for r, left in open_demand.items() if left > 0 and r.admits(attrs))
        if not admitting:
            return Verdict.NO_OPEN_ROUND, ()
        room = any(
            self.in_flight.get(r, 0) < math.ceil(self.multiple * open_demand[r]) for r in admitting
        )
        if not room:
            return Verdict.ENOUGH_IN_FLIGHT, ()
        return Verdict.FORWARD, admitting

    def charge(self, charged: tuple[Requirement, ...]) -> None:
        for r in charged:
            self.in_flight[r] = self.in_flight.get(r, 0) + 1

    def release(self, charged: tuple[Requirement, ...]) -> None:
        for r in charged:
            left = self.in_flight[r] - 1
            if left:
                self.in_flight[r] = left
            else:
                del self.in_flight[r]


AttrsKey = tuple[tuple[str, float], ...]


class SupplyCounter:
    """Check-ins received per attribute set since the last report."""

    def __init__(self, gateway: str, started: float) -> None:
        self.gateway = gateway
        self.since = started
        self.counts: dict[AttrsKey, int] = {}
        self.sent = 0

    def add(self, attrs: Mapping[str, float]) -> None:
        key = tuple(sorted(attrs.items()))
        self.counts[key] = self.counts.get(key, 0) + 1

    def reports(self, now: float) -> Iterator[ev.SupplyReport]:
        """The counts since the last call as reports (several when more attribute sets or
        larger counts than one report holds; each with its own source id), and reset."""
        counts, self.counts = self.counts, {}
        interval = max(now - self.since, 1e-3)
        self.since = now
        entries = [
            ev.SupplyCount(attrs=dict(key), count=min(n - done, DEMAND_MAX))
            for key, n in counts.items()
            for done in range(0, n, DEMAND_MAX)
        ]
        for part, start in enumerate(range(0, len(entries), BATCH_MAX)):
            self.sent += 1
            yield ev.SupplyReport(
                event_id=f"{self.gateway}:supply:{self.sent}",
                time=now,
                gateway=self.gateway if part == 0 else f"{self.gateway}.{part}",
                interval_s=interval,
                counts=entries[start : start + BATCH_MAX],
            )
