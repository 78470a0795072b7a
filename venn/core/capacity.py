"""Device capacity, in one place: the fleet means that scale a device's compute and
network factors to the measures it reports, and the capacity proxy that ranks devices
into tiers (paper §4: ``60*comp + 10/comm`` seconds, lower is faster).

A trace gives each check-in factors relative to the fleet mean (``comp``, ``comm``); a
device reports measures (ms per sample, kbps). The simulator, the scheduler service, the
device emulator and the load test all convert and score through these functions.
"""

from __future__ import annotations

import math

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
