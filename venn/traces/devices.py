"""The paper's 959 device profiles, with eligibility expressed as attribute thresholds.

The reference simulator only knows, for each of 959 AI-Benchmark phones, *which tiers*
it meets (``aibenchmark_eligibility_4.json``). To let any requirement be checked against
reported attributes, each profile borrows the attributes of a real device of
``client_spec_speed.json`` that meets exactly the same tiers under the four tier
requirements of ``job_config_random_eli.yml``; eligibility is then pure data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from venn.core.model import Requirement
from venn.data import data_file
from venn.workloads.loader import tier_requirements

NUM_PROFILES = 959
PROFILE_ATTRIBUTES: tuple[str, ...] = (
    "cpu_f",
    "ram",
    "fp16_mem",
    "android_os",
    "speed_ms_per_sample",
)


@dataclass(frozen=True)
class DeviceProfiles:
    """Device profiles: reported attributes and the paper tiers each profile meets."""

    attrs: tuple[dict[str, float], ...]
    tiers_met: tuple[tuple[int, ...], ...]
    names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.attrs)

    def column(self, attribute: str) -> np.ndarray:
        """One attribute over all profiles (NaN where a profile does not report it)."""
        return np.array([a.get(attribute, np.nan) for a in self.attrs], dtype=np.float64)

    def admitted(self, requirement: Requirement) -> np.ndarray:
        """Boolean mask over profiles: which ones ``requirement`` admits."""
        mask = np.ones(len(self.attrs), dtype=bool)
        for name, minimum in requirement.thresholds:
            # NaN >= x is False: a missing attribute fails the threshold, as in admits().
            mask &= self.column(name) >= minimum
        return mask


def tiers_of(attrs: Mapping[str, float], tiers: Mapping[int, Requirement]) -> tuple[int, ...]:
    """The tiers (sorted) whose requirement admits a device with these attributes."""
    return tuple(t for t in sorted(tiers) if tiers[t].admits(attrs))


def _spec_attrs(entry: Mapping[str, Any]) -> dict[str, float]:
    return {
        "cpu_f": float(entry["cpu_f"]),
        "ram": float(entry["ram"]),
        "fp16_mem": float(entry["fp16_mem"]),
        "android_os": float(entry["android_os"]),
        "speed_ms_per_sample": float(entry["speed"]),
    }


@lru_cache(maxsize=1)
def load_device_profiles() -> DeviceProfiles:
    """Build the paper's 959 profiles from the packaged data (cached).

    Profile ``i`` meets the tiers at index ``i`` of ``aibenchmark_eligibility_4.json``;
    its attributes are those of a ``client_spec_speed.json`` device meeting exactly those
    tiers, taken in turn (by ascending device id) among the matching devices, so the
    result is deterministic and uses as many distinct devices as possible.
    """
    with data_file("aibenchmark_eligibility_4.json").open() as fh:
        eligibility: list[list[int]] = json.load(fh)
    with data_file("client_spec_speed.json").open() as fh:
        specs: dict[str, dict[str, Any]] = json.load(fh)
    tiers = tier_requirements()

    by_tiers: dict[tuple[int, ...], list[tuple[str, dict[str, float]]]] = {}
    for key in sorted(specs, key=int):
        attrs = _spec_attrs(specs[key])
        by_tiers.setdefault(tiers_of(attrs, tiers), []).append((str(specs[key]["device"]), attrs))

    used: dict[tuple[int, ...], int] = {}
    attrs_out: list[dict[str, float]] = []
    tiers_out: list[tuple[int, ...]] = []
    names: list[str] = []
    for index, entry in enumerate(eligibility):
        met = tuple(sorted(int(t) for t in entry))
        pool = by_tiers.get(met)
        if not pool:
            raise ValueError(f"profile {index}: no device in client_spec_speed meets {met}")
        k = used.get(met, 0)
        used[met] = k + 1
        name, attrs = pool[k % len(pool)]
        attrs_out.append(dict(attrs))
        tiers_out.append(met)
        names.append(name)
    return DeviceProfiles(attrs=tuple(attrs_out), tiers_met=tuple(tiers_out), names=tuple(names))
