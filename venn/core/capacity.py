"""Device capacity, in one place: the fleet means that scale a device's compute and
network factors to the measures it reports, and the capacity proxy that ranks devices
into tiers (paper §4: ``60*comp + 10/comm`` seconds, lower is faster).

A trace gives each check-in factors relative to the fleet mean (``comp``, ``comm``); a
device reports measures (ms per sample, kbps). The simulator, the scheduler service, the
device emulator and the load test all convert and score through these functions, and
tier devices with ``TierModel`` (equal-count cut-offs on the score).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

FLEET_MEAN_COMP_MS = 78.0
"""Milliseconds per sample of a device of compute factor 1."""
FLEET_MEAN_COMM_KBPS = 13_736.0
"""Bandwidth of a device of network factor 1."""


def capacity_proxy(comp: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """The tiering score of many devices from their factors (infinite without network)."""
    comp = np.asarray(comp, dtype=np.float64)
    comm = np.asarray(comm, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return 60.0 * comp + 10.0 / comm


def proxies_of(speeds_ms: np.ndarray, bandwidths_kbps: np.ndarray) -> np.ndarray:
    """The score of many devices from the measures they report."""
    return capacity_proxy(
        np.asarray(speeds_ms, dtype=np.float64) / FLEET_MEAN_COMP_MS,
        np.asarray(bandwidths_kbps, dtype=np.float64) / FLEET_MEAN_COMM_KBPS,
    )


def proxy_of(speed_ms: float, bandwidth_kbps: float) -> float:
    """The score of one device from the measures it reports (``proxies_of`` of one)."""
    comp = speed_ms / FLEET_MEAN_COMP_MS
    comm = bandwidth_kbps / FLEET_MEAN_COMM_KBPS
    return 60.0 * comp + (10.0 / comm if comm > 0 else math.inf)


def measures_of(comp: np.ndarray, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What devices of these factors report: (ms per sample, kbps)."""
    return (
        np.asarray(comp, dtype=np.float64) * FLEET_MEAN_COMP_MS,
        np.asarray(comm, dtype=np.float64) * FLEET_MEAN_COMM_KBPS,
    )


REFERENCE_CUTOFFS: dict[int, tuple[float, ...]] = {
    2: (120.0,),
    3: (72.0, 170.0),
    4: (57.0, 120.0, 170.0),
}
"""Tier cut-offs of the reference code, in seconds of the proxy ``60*comp + 10/comm``."""


@dataclass(frozen=True)
class TierModel:
    """Capacity tiers by cut-offs on a speed proxy (lower proxy = faster; tier 0 fastest)."""

    cutoffs: tuple[float, ...]
    prior_tail_ratio: tuple[float, ...] | None = None

    @property
    def num_tiers(self) -> int:
        return len(self.cutoffs) + 1

    def tier_of(self, proxy: float) -> int:
        """Tier of one device."""
        # bisect, not np.searchsorted: this runs once per check-in and numpy's scalar
        # call costs ~10 µs; both are "right" insertion points, so tiers are identical.
        return bisect.bisect_right(self.cutoffs, proxy)

    def tiers_of(self, proxy: np.ndarray) -> np.ndarray:
        """Tiers of many devices."""
        return np.searchsorted(np.asarray(self.cutoffs), proxy, side="right").astype(np.int64)

    @classmethod
    def from_sample(cls, proxy: np.ndarray, num_tiers: int) -> TierModel:
        """Equal-count tiers from a sample of the fleet's proxy values, with tail priors."""
        qs = np.quantile(proxy, [i / num_tiers for i in range(1, num_tiers)])
        model = cls(tuple(float(q) for q in qs))
        tiers = model.tiers_of(proxy)
        fleet = float(np.percentile(proxy, 95))
        prior = tuple(
            float(np.percentile(proxy[tiers == u], 95)) / fleet if (tiers == u).any() else 1.0
            for u in range(num_tiers)
        )
        return cls(model.cutoffs, prior)
