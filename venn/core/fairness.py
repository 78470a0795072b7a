"""The epsilon fairness knob.

Fair-share JCT of job i is T_i = M * sd_i (M concurrent jobs, sd_i its JCT alone). We
read "service received" as progress: rho_i = (share of its rounds done) / (share of its
fair-share JCT elapsed). A job behind its fair share (rho < 1) gets priority through
d'_i = d_i * rho_i^eps, and a group's queue counts (1/rho_group)^eps more. eps = 0 is
pure IRS.
"""

from __future__ import annotations

from dataclasses import dataclass

RHO_MIN, RHO_MAX = 1e-3, 1e3


@dataclass(frozen=True)
class Progress:
    """What the knob needs to know of one job at one instant."""

    elapsed_s: float
    done_fraction: float
    standalone_jct_s: float


def progress_ratio(p: Progress, concurrent_jobs: int) -> float:
    """rho: achieved progress over fair-share progress (1.0 when nothing is known yet)."""
    if p.elapsed_s <= 0 or p.standalone_jct_s <= 0:
        return 1.0
    fair = p.elapsed_s / (max(1, concurrent_jobs) * p.standalone_jct_s)
    if fair <= 0:
        return 1.0
    return min(RHO_MAX, max(RHO_MIN, p.done_fraction / fair))


def demand_weight(rho: float, eps: float) -> float:
    """Multiplier of a job's remaining demand in queue ordering."""
    return 1.0 if eps == 0 else rho**eps


def group_queue_scale(rhos: list[float], eps: float) -> float:
    """Multiplier of a group's queue length (behind-schedule groups count more)."""
    if eps == 0 or not rhos:
        return 1.0
    mean = sum(rhos) / len(rhos)
    return (1.0 / mean) ** eps
