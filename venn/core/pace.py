"""Pace steering: when a device that got no assignment should check in again.

Google's FL system (Bonawitz et al. 2019, section 2.3) tells each device when to come back,
as often as the scheduled work needs and no more. Here a device's next check-in follows
what the open rounds want of it:

- ``WAITED``: an open round with remaining demand admits the device and waits for devices
  (the check-ins at the scheduler do not cover its demand yet); it comes back soon
  (``wanted_s``), so rounds waiting for devices like it fill sooner;
- ``UNWANTED``: no open round admits it; it comes back late (``idle_s``, the bound), so
  a fleet that no round can use checks in rarely;
- ``BASE``: the rounds that admit it have enough check-ins coming already (the gateway's
  forward quota is full: more devices sooner would only be told "enough" sooner), or the
  answerer cannot tell (its view of demand is not read yet); the base pace (``base_s``,
  VENN_GATEWAY_RETRY_AFTER_S).

Each answer is jittered by up to ``jitter`` of its interval either way, so a fleet told
"later" at one instant does not come back at one instant.

Pacing changes what the supply estimate sees: a device told to come back in 120 s checks
in a quarter as often as one told 30 s, so counted as check-ins, devices no round wants
would look rare and those every round wants common, and IRS (which plans with each
group's share of the check-ins) would see false rates. ``weight`` undoes it: a check-in
of a device paced at ``r`` counts ``r / base_s`` check-ins, i.e. what the device would
have made at the base pace. The gateway (which sets the pace) weights what it reports;
the simulator weights what its supply window holds the same way.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Want(enum.IntEnum):
    """What the open rounds want of a device, as far as its answerer knows."""

    WAITED = 0
    BASE = 1
    UNWANTED = 2


@dataclass(frozen=True, slots=True)
class Pace:
    """The intervals of the three answers and their jitter (seconds; see the module)."""

    base_s: float = 30.0
    wanted_s: float = 10.0
    idle_s: float = 120.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.wanted_s <= self.base_s <= self.idle_s:
            raise ValueError(
                f"pace needs 0 < wanted_s <= base_s <= idle_s, got "
                f"{self.wanted_s:g}, {self.base_s:g}, {self.idle_s:g}"
            )
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter:g}")

    @classmethod
    def constant(cls, interval_s: float) -> Pace:
        """No steering: every device comes back after ``interval_s`` (no jitter)."""
        return cls(interval_s, interval_s, interval_s, 0.0)

    @property
    def steers(self) -> bool:
        """Whether the answers differ by want at all."""
        return self.wanted_s != self.idle_s

    def interval_s(self, want: Want) -> float:
        """The nominal interval (no jitter) of a device that is ``want``."""
        if want is Want.WAITED:
            return self.wanted_s
        if want is Want.UNWANTED:
            return self.idle_s
        return self.base_s

    def retry_after(self, want: Want, u: float) -> int:
        """Whole seconds until the device's next check-in, ``u`` a U(0, 1) draw: the
        interval times 1 +- ``jitter``, at least 1 s."""
        spread = 1.0 + self.jitter * (2.0 * u - 1.0)
        return max(1, math.floor(self.interval_s(want) * spread + 0.5))

    def weight(self, want: Want) -> float:
        """The check-ins one check-in of a device that is ``want`` stands for at the base
        pace (see the module)."""
        return self.interval_s(want) / self.base_s
