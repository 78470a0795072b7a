"""What a gateway forwards to the scheduler, and the supply it counts for it.

The scheduler's work grows with what it reads. A gateway answers at once every check-in
that no open round may take (no open round admits the device), and every one that would
only queue behind enough others; it forwards the rest. "Enough" is the fleet's quota,
``multiple`` times a requirement's remaining demand in flight at the scheduler, shared by
the live gateways the scheduler's status counts (G). The quota q is held in lumps of about
``lump`` check-ins by H = min(G, max(min(q, MIN_HOLDERS), ceil(q / lump))) gateways, each drawn
with chance H / G when the requirement opens, each holding ceil(q / H); after
``patience_s`` with demand still open every gateway holds at least one, so a requirement
whose devices are rare is not left to a few gateways.

Why lumps: a gateway fills what it holds from its own check-ins within milliseconds, so
what it holds reaches the scheduler as one CheckinBatch, and the scheduler's cost is per
record (a decision, an AssignmentBatch, a reply, a read-back). Held one apiece by q of 50
gateways, a round's 20 forwarded check-ins were 20 records (docs/results/fleet.md).
MIN_HOLDERS keeps the chance that no gateway is drawn small (about e^-4). Without the
share, each of G gateways held q and the scheduler read G times the check-ins a round
needs. Every check-in, forwarded or not, is
counted per attribute set and reported as a ``SupplyReport``: the supply mix the
scheduler plans with.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Iterator, Mapping

from venn import events as ev
from venn.core.model import Requirement
from venn.fields import BATCH_MAX, DEMAND_MAX

MIN_HOLDERS = 4
"""Fewest gateways drawn to hold a requirement's quota (when G is larger)."""


class Verdict(enum.Enum):
    FORWARD = "forward"
    NO_OPEN_ROUND = "no_open_round"
    ENOUGH_IN_FLIGHT = "enough_in_flight"


class ForwardQuota:
    """Per requirement, how many forwarded check-ins await the scheduler's answer, against
    this gateway's share of the fleet's quota."""

    def __init__(
        self,
        multiple: float,
        patience_s: float = 1.0,
        rng: random.Random | None = None,
        lump: int = 1,
    ) -> None:
        if multiple <= 0:
            raise ValueError("multiple must be > 0")
        if patience_s < 0:
            raise ValueError("patience_s must be >= 0")
        if lump < 1:
            raise ValueError("lump must be >= 1")
        self.multiple = multiple
        self.patience_s = patience_s
        self.lump = lump
        self.gateways = 1
        """Live gateways sharing the quota (the scheduler's status says; 1 until it does)."""
        self.in_flight: dict[Requirement, int] = {}
        self._rng = rng or random.Random()
        self._opened: dict[Requirement, tuple[float, float]] = {}
        """Requirement -> when this gateway saw it open, and its draw in [0, 1)."""
        self._synced: Mapping[Requirement, int] | None = None

    def _sync(self, open_demand: Mapping[Requirement, int], now: float) -> None:
        """Draws for the requirements that opened, none for those that closed (the demand
        view hands out a new mapping whenever open demand changed)."""
        self._synced = open_demand
        opened = self._opened
        for r in [r for r in opened if open_demand.get(r, 0) <= 0]:
            del opened[r]
        for r, left in open_demand.items():
            if left > 0 and r not in opened:
                opened[r] = (now, self._rng.random())

    def cap(self, r: Requirement, left: int, now: float) -> int:
        """How many of ``r``'s check-ins this gateway may have in flight now."""
        q = math.ceil(self.multiple * left)
        g = self.gateways
        if g <= 1:
            return q
        holders = min(g, max(min(q, MIN_HOLDERS), math.ceil(q / self.lump)))
        if holders >= g:
            return math.ceil(q / g)
        opened, draw = self._opened.get(r) or (now, 0.0)
        if draw < holders / g:
            return math.ceil(q / holders)
        return 1 if now - opened >= self.patience_s else 0

    def verdict(
        self, attrs: Mapping[str, float], open_demand: Mapping[Requirement, int], now: float
    ) -> tuple[Verdict, tuple[Requirement, ...]]:
        """Forward or answer now; with FORWARD, the requirements to charge (every open
        one that admits the device: the scheduler may assign it to any of them)."""
        if open_demand is not self._synced:
            self._sync(open_demand, now)
        admitting = tuple(r for r, left in open_demand.items() if left > 0 and r.admits(attrs))
        if not admitting:
            return Verdict.NO_OPEN_ROUND, ()
        room = any(self.in_flight.get(r, 0) < self.cap(r, open_demand[r], now) for r in admitting)
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
    """Check-ins received per attribute set since the last report, each device once: one
    device token checking in 1,500 times in 0.4 s filled the scheduler's supply window with
    its own attribute set, and a normal job was refused ``no_eligible_supply`` (issue 34,
    item 8). A device counts at most once per report interval, with the attribute set it
    first gave in it, weighted by the pace it is told (``venn.core.pace.Pace.weight``: a
    device told to come back four times later counts four), so the scheduler reads the
    rates the fleet would check in at the base pace. Reported counts are whole: what a
    report rounds off an attribute set's count is carried into the next one that has it."""

    def __init__(self, gateway: str, started: float) -> None:
        self.gateway = gateway
        self.since = started
        self.counts: dict[AttrsKey, float] = {}
        self.devices: set[str] = set()
        self.sent = 0
        self._carry: dict[AttrsKey, float] = {}

    def add(
        self, attrs: Mapping[str, float], device: str | None = None, weight: float = 1.0
    ) -> None:
        """One check-in (``device`` None: one of a device not named, counted every time)
        standing for ``weight`` check-ins at the base pace."""
        if device is not None:
            if device in self.devices:
                return
            self.devices.add(device)
        key = tuple(sorted(attrs.items()))
        self.counts[key] = self.counts.get(key, 0.0) + weight

    def _whole(self, counts: dict[AttrsKey, float]) -> dict[AttrsKey, int]:
        """The counts rounded down, each with what the last report carried; the carries of
        attribute sets not counted this time are dropped (less than one check-in each)."""
        carry, self._carry = self._carry, {}
        out: dict[AttrsKey, int] = {}
        for key, n in counts.items():
            total = n + carry.get(key, 0.0)
            whole = int(total)
            if total - whole > 1e-9:
                self._carry[key] = total - whole
            if whole:
                out[key] = whole
        return out

    def reports(self, now: float, token: str | None = None) -> Iterator[ev.SupplyReport]:
        """The counts since the last call as reports (several when more attribute sets or
        larger counts than one report holds; each with its own source id), each carrying
        ``token`` (the gateway's own, where the deployment authenticates), and reset."""
        counts, self.counts = self._whole(self.counts), {}
        self.devices = set()
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
                token=token,
            )
