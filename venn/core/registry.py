"""Policy names as users type them, and the scheduler each one builds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from venn.core.capacity import REFERENCE_CUTOFFS, TierModel
from venn.core.policies import (
    FifoPolicy,
    IrsPolicy,
    LpPolicy,
    RandomOrderPolicy,
    RandomPolicy,
    SrsfPolicy,
)
from venn.core.policies.base import Policy
from venn.core.scheduler import Scheduler
from venn.core.tenants import TenantConfig


@dataclass(frozen=True)
class PolicySpec:
    name: str
    description: str
    make_policy: Callable[[int], Policy]  # from the scheduler's seed
    matching: bool
    restrict_contested: bool = False  # True: Algorithm 2 as the paper states it
    dispatch_margin: float | None = None  # Scheduler's: None offers every round D


POLICIES: dict[str, PolicySpec] = {
    spec.name: spec
    for spec in (
        PolicySpec(
            "random", "random eligible job with open demand", lambda seed: RandomPolicy(), False
        ),
        PolicySpec(
            "random-order",
            "random priority per round request, kept until the round fills (reference driver)",
            RandomOrderPolicy,
            False,
        ),
        PolicySpec("fifo", "earliest-arrived eligible job", lambda seed: FifoPolicy(), False),
        PolicySpec(
            "srsf",
            "smallest remaining demand of the current round",
            lambda seed: SrsfPolicy(),
            False,
        ),
        PolicySpec(
            "venn",
            "IRS scheduling + tier matching of rounds no other open job competes with",
            lambda seed: IrsPolicy(),
            True,
        ),
        PolicySpec("venn-sched", "IRS scheduling only (ablation)", lambda seed: IrsPolicy(), False),
        PolicySpec(
            "venn-trim",
            "venn, each round offered 1.15 x the results it needs while 3 round latencies "
            "are left before its deadline, else its whole demand",
            lambda seed: IrsPolicy(),
            True,
            dispatch_margin=0.15,
        ),
        PolicySpec(
            "venn-lp",
            "venn with ownership from a receding-horizon LP over every unfinished job",
            lambda seed: LpPolicy(),
            True,
        ),
        PolicySpec(
            "venn-paper",
            "the paper's Algorithms 1 and 2: IRS by the round's remaining demand + tier matching",
            lambda seed: IrsPolicy("round"),
            True,
            restrict_contested=True,
        ),
        PolicySpec(
            "venn-match", "tier matching on FIFO (ablation)", lambda seed: FifoPolicy(), True
        ),
    )
}


def make_scheduler(
    name: str,
    *,
    seed: int = 0,
    tiers: TierModel | None = None,
    num_tiers: int = 3,
    fairness_eps: float = 0.0,
    supply_window: int = 1000,
    supply_reports: bool = False,
    track_devices: bool = True,
    tenants: TenantConfig | None = None,
) -> Scheduler:
    """Build the scheduler for a policy name (see ``POLICIES``).

    Matching policies use ``tiers`` when given, else the reference code's cut-offs for
    ``num_tiers`` tiers.
    """
    try:
        spec = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
    tier_model = None
    if spec.matching:
        tier_model = tiers or TierModel(REFERENCE_CUTOFFS[num_tiers])
    return Scheduler(
        spec.make_policy(seed),
        tiers=tier_model,
        fairness_eps=fairness_eps,
        supply_window=supply_window,
        supply_reports=supply_reports,
        seed=seed,
        track_devices=track_devices,
        tenants=tenants,
        restrict_contested=spec.restrict_contested,
        dispatch_margin=spec.dispatch_margin,
    )
