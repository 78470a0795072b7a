"""Plain data of the scheduling model: requirements, jobs, rounds and assignments.

Everything here is immutable value data shared by the core, the simulator and the
pipeline. Times are seconds on whatever clock the caller runs (trace time in the
simulator, scaled wall-clock time in the pipeline); the core never reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

DEFAULT_TENANT = "default"
"""The tenant of a job registered without one."""

# Names used by the workload YAMLs of the paper, mapped to the attribute a device reports.
ATTRIBUTE_ALIASES: dict[str, str] = {
    "memory": "fp16_mem",
    "cpu": "cpu_f",
    "os": "android_os",
    "ram": "ram",
}


@dataclass(frozen=True, order=True)
class Requirement:
    """A job's resource requirement: a conjunction of thresholds ``attribute >= value``.

    Jobs with equal requirements form one *group* of the IRS problem. A device that does
    not report an attribute fails every threshold on it.
    """

    thresholds: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, mapping: Mapping[str, float] | None = None, **kwargs: float) -> Requirement:
        """Build a requirement from ``{attribute: minimum}``; paper aliases are accepted."""
        merged = dict(mapping or {}) | kwargs
        items = {ATTRIBUTE_ALIASES.get(k, k): float(v) for k, v in merged.items()}
        return cls(tuple(sorted(items.items())))

    def admits(self, attrs: Mapping[str, float]) -> bool:
        """True iff a device with these attributes meets every threshold."""
        for name, minimum in self.thresholds:
            value = attrs.get(name)
            if value is None or value < minimum:
                return False
        return True

    def as_dict(self) -> dict[str, float]:
        return dict(self.thresholds)

    def __str__(self) -> str:
        if not self.thresholds:
            return "any"
        return ",".join(f"{k}>={v:g}" for k, v in self.thresholds)


@dataclass(frozen=True)
class JobSpec:
    """A federated-learning job as its owner registers it.

    ``demand`` devices are asked for in each round; a round succeeds once
    ``ceil(success_ratio * demand)`` results arrive before ``deadline`` seconds; the job
    finishes after ``rounds`` successful rounds.
    """

    job_id: str
    requirement: Requirement
    demand: int
    rounds: int
    deadline: float
    arrival: float = 0.0
    workload_s: float = 30.0
    success_ratio: float = 0.8
    tier: int = 0  # the workload's requirement tier label (1-4); informational only
    template: int = -1  # index of the workload template it was drawn from
    tenant: str = DEFAULT_TENANT  # who owns it (its token's owner; venn.core.tenants)
    priority: int = 0  # its priority class inside its tenant (higher first)

    @cached_property
    def results_needed(self) -> int:
        """Results that make a round succeed (80% of D by default, at least 1)."""
        return max(1, math.ceil(self.success_ratio * self.demand - 1e-9))


@dataclass(frozen=True)
class Assignment:
    """The scheduler's answer to a check-in: this device serves this job's round."""

    job_id: str
    round_index: int
    device_id: str | int
