"""Tenants, their shares and priority classes, layered on top of a policy.

A job belongs to a tenant (``JobSpec.tenant``) and carries a priority class
(``JobSpec.priority``, higher first). Each tenant has a weight; its *share* is its weight
over the weights of the tenants with open demand, so an idle tenant's share is lent to the
others and comes back the moment it opens a round (nothing is preempted: a device
assigned stays assigned until its task ends).

What a tenant *used* is the devices assigned to its jobs that another tenant's open round
was also eligible for; what it is *owed* of them is, per such device, its weight over the
weights of the tenants whose open rounds were eligible (its contenders). Both are decayed
with a half-life of ``half_life_s`` (a day by default; Slurm's fair-share decays usage the
same way, PBS halves it every 24 h): a device assigned a half-life ago counts half. Judged
over a horizon that long, a tenant may run ahead of its share while its jobs are short
and is held back later, instead of being held to its share every half hour, which broke
the policy's least-remaining-work order across tenants (docs/results/tenants.md).
Devices only one tenant wants count for nobody (nobody was denied them), and neither
does what an idle tenant lent: a tenant coming back gets its share from then on, not a
payback. Device-assignments, not device time: the core
knows an assignment when it makes it, while a task's device time is known only when it
ends (up to a round deadline later, or never for a device that drops out), and every job
of the Table 1 workloads declares the same task time, so assignments are device time up
to the devices' speeds. A decision only counts its job's take; at the next compile each
take is charged with the table it was made under: a job heading some rows is charged,
per device, the part of those rows' recent supply that is contended and each tenant's
entitlement to it. The decayed use is not in the scheduler's snapshots: a restarted
scheduler starts it at zero.

At each table compile the tenants with open demand fall in bands by their use against
what they are owed (relative): 0 under it by more than ``tolerance``, 2 over it by more,
1 within; all 0 (the policy alone) while every tenant is within. A tenant in band 0 goes
first in every one of the policy's sections (it may take a device IRS planned for
another requirement: that is how it catches up); the others keep the policy's sections
outermost, by band inside each, so while nobody is under, IRS's ownership holds and a
tenant over its share goes last among the jobs of a section. Inside a tenant a higher
priority class goes first: a class is ranked among its own tenant's classes only, so a
tenant's priorities order its own jobs and never another tenant's (a tenant of weight 1 at
priority 1000 took 32 of 40 contended devices from one of weight 3: issue 34, item 7);
inside a tenant and priority class the order is IRS's. The layer
only reorders candidates: a device any open job can take is assigned (work-conserving).
The policy plans over the requirements (groups merged back), so its plan is the
tenant-blind one. With one tenant and one priority class the sections, and so the
decisions, are exactly those of the policy alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from venn.core.model import DEFAULT_TENANT, JobSpec, Requirement
from venn.core.policies.base import Policy, PolicyView
from venn.core.state import JobState

KEY_FACTOR_MIN = 1e-3
"""A standing's key factor is kept within [this, 1 / this]."""
MIN_OWED = 1.0
"""A tenant owed less than one device (decayed) is not judged: its standing would be the
ratio of two remnants."""

__all__ = [
    "DEFAULT_TENANT",
    "TenantConfig",
    "TenantLayer",
    "TenantLedger",
    "TenantShare",
    "parse_tenants",
]


@dataclass(frozen=True)
class TenantShare:
    """One tenant's settings: its weight and the most open demand its jobs may ask
    (devices over its admitted, unfinished jobs' rounds; 0: no cap)."""

    weight: float = 1.0
    max_open_demand: int = 0

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"a tenant's weight must be positive, not {self.weight}")
        if self.max_open_demand < 0:
            raise ValueError("a tenant's max_open_demand must be >= 0")


@dataclass(frozen=True)
class TenantConfig:
    """Every tenant the operator configured; a tenant not listed gets ``default``."""

    tenants: Mapping[str, TenantShare] = field(default_factory=dict)
    default: TenantShare = TenantShare()
    half_life_s: float = 86_400.0
    """Use and what was owed lose half their weight in this long."""
    rerank_every: int = 32
    """While tenants contend, a job takes at most this many devices between two
    rankings (a dispatch table otherwise holds until a round fills)."""
    tolerance: float = 0.05
    key_exponent: float = 0.0
    """0: tenants in bands by standing (above). Above 0: no bands; every job's order key
    is multiplied by its tenant's standing (decayed use over what it was owed) to this
    power, so a tenant over its share has its jobs pushed back in proportion, its short
    jobs still ahead of others' long ones."""

    def __post_init__(self) -> None:
        if not self.half_life_s > 0:
            raise ValueError(f"the tenant half-life must be positive, not {self.half_life_s}")
        if not self.key_exponent >= 0:
            raise ValueError(f"the key exponent must be >= 0, not {self.key_exponent}")

    def share_of(self, tenant: str) -> TenantShare:
        return self.tenants.get(tenant, self.default)

    def weight(self, tenant: str) -> float:
        return self.share_of(tenant).weight


def parse_tenants(text: str) -> dict[str, TenantShare]:
    """``team-a=3,team-b=1:500`` -> each tenant's share (weight, max open demand)."""
    out: dict[str, TenantShare] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, rest = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"a tenant is name=weight[:max_open_demand], not {item!r}")
        weight, _, cap = rest.partition(":")
        out[name.strip()] = TenantShare(float(weight), int(cap) if cap.strip() else 0)
    return out


class TenantLedger:
    """Per tenant, decayed with a half-life of scheduler time: the contended devices
    assigned to its jobs (``used``) and those it was entitled to (``owed``: of each
    contended device, its weight over the weights of the tenants contending for it).

    A decision only counts its job's take; the scheduler files it at its next table
    compile (``charge``, then ``advance``), where standing is read: a decision stays
    cheap, and use is timed by the compiles (a table holds at most ``rerank_every``
    assignments of a job while tenants contend)."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.used: dict[str, float] = {}
        self.owed: dict[str, float] = {}
        self.pending: dict[str, tuple[float, float]] = {}
        self.at: float | None = None  # when ``used`` and ``owed`` were last decayed
        self.total: dict[str, float] = {}  # used over the whole run, not decayed (reports)

    def charge(self, tenant: str, used: float, owed: float = 0.0) -> None:
        u, o = self.pending.get(tenant, (0.0, 0.0))
        self.pending[tenant] = (u + used, o + owed)

    def advance(self, now: float) -> None:
        """Decay what is held to ``now``, then file what is pending."""
        used, owed = self.used, self.owed
        if self.at is not None and now > self.at:
            keep = 0.5 ** ((now - self.at) / self.half_life_s)
            for tenant in used:
                used[tenant] *= keep
            for tenant in owed:
                owed[tenant] *= keep
        if self.at is None or now > self.at:
            self.at = now
        if self.pending:
            total = self.total
            for tenant, (u, o) in self.pending.items():
                used[tenant] = used.get(tenant, 0.0) + u
                owed[tenant] = owed.get(tenant, 0.0) + o
                total[tenant] = total.get(tenant, 0.0) + u
            self.pending = {}


def rank_tenants(
    active: list[str],
    used: Mapping[str, float],
    config: TenantConfig,
    owed: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """Band of each tenant with open demand: 0 if its use is under what it is owed by
    more than ``config.tolerance`` (relative), 2 if over it by more, else 1; all 0 (the
    policy alone) while every tenant is within the tolerance. Without ``owed``, a
    tenant is owed its weight share of the active tenants' use."""
    if len(active) <= 1:
        return dict.fromkeys(active, 0)
    if owed is None:
        weights = {t: config.weight(t) for t in active}
        total_w = sum(weights.values())
        total_used = sum(used.get(t, 0.0) for t in active)
        owed = {t: total_used * weights[t] / total_w for t in active}
    tol = config.tolerance
    ranks: dict[str, int] = {}
    for t in active:
        due = owed.get(t, 0.0)
        if due < MIN_OWED:
            ranks[t] = 1  # hardly contended for lately: nothing to judge
            continue
        error = used.get(t, 0.0) / due - 1.0
        ranks[t] = 0 if error < -tol else 2 if error > tol else 1
    if all(r == 1 for r in ranks.values()):
        return dict.fromkeys(active, 0)
    return ranks


class TenantLayer:
    """A policy with tenant standing and priority classes above its own sections.

    ``labels[g]`` is group g's (tenant, priority, base): base is the group of its
    requirement alone (the scheduler appends as it makes groups). The policy plans over
    the base groups, exactly as without tenants (its groups split by tenant would change
    IRS's plan: a signature owned by one tenant's share of a requirement). With ``c``
    priority classes and ``k`` policy sections, a group of band 0 is in section
    ``inner * c + priority rank`` and any other in ``k * c + inner * (bands - 1) * c +
    (band - 1) * c + priority rank``, ``inner`` its base group's section.
    """

    def __init__(
        self,
        inner: Policy,
        config: TenantConfig,
        ledger: TenantLedger,
        labels: list[tuple[str, int, int]],
    ) -> None:
        self.inner = inner
        self.config = config
        self.ledger = ledger
        self.labels = labels
        self.mode: Literal["first", "uniform"] = inner.mode
        self.ordering: Literal["idx", "key"] = inner.ordering
        self.num_sections = inner.num_sections
        self.ranks: dict[str, int] = {}
        self.factors: dict[str, float] = {}  # tenant -> order key factor (key_exponent)
        self.refile = False  # a factor moved: the scheduler files every open job again
        self._group_rank = np.zeros(0, dtype=np.int64)
        self._base = np.zeros(0, dtype=np.int64)  # group -> its base group
        self._first = np.zeros(0, dtype=np.int64)  # base group -> its first group
        self._merged: tuple[np.ndarray, np.ndarray] | None = None  # (sig_matrix, merged)
        self._key: tuple[object, ...] | None = None
        self._classes = 1
        self._inner: np.ndarray | None = None  # the inner table ``_table`` was made from
        self._table: np.ndarray | None = None
        self.bases: dict[Requirement, int] = {}  # requirement -> its base group
        self.taken: dict[int, int] = {}  # job idx -> devices taken since the last compile
        self._frac: list[float] = []  # job idx -> the part of its devices contended
        self._owed: list[list[float]] = []  # job idx -> per active tenant, owed per device
        self._active: list[str] = []
        self._multi = np.zeros(0, dtype=bool)  # signature -> wanted by 2+ tenants' rounds
        self._entitled = np.zeros((0, 0))  # signature -> each active tenant's entitlement
        self._multi_key: tuple[object, ...] = ()
        self._frac_key: tuple[object, ...] = ()

    def label(self, group: int, spec: JobSpec) -> None:
        """File a group the scheduler made for ``spec`` (its first job) or found."""
        if group == len(self.labels):
            base = self.bases.setdefault(spec.requirement, len(self.bases))
            self.labels.append((spec.tenant, spec.priority, base))

    def weight(self, job: JobState) -> float:
        factor = self.factors.get(job.spec.tenant)
        return self.inner.weight(job) * factor if factor is not None else self.inner.weight(job)

    def _key_factors(self, active: list[str]) -> bool:
        """Each active tenant's key factor from its standing (``key_exponent``); True if
        one moved by more than 1% (every open job must then be filed again)."""
        ledger, power = self.ledger, self.config.key_exponent
        new = {}
        for t in active:
            due = ledger.owed.get(t, 0.0)
            standing = ledger.used.get(t, 0.0) / due if due >= MIN_OWED else 1.0
            new[t] = min(max(standing, KEY_FACTOR_MIN) ** power, 1.0 / KEY_FACTOR_MIN)
        old = self.factors
        moved = any(abs(new.get(t, 1.0) / old.get(t, 1.0) - 1) > 0.01 for t in {*new, *old})
        if moved:
            self.factors = new
        return moved

    def _bases(self, num_groups: int) -> None:
        if len(self._base) != num_groups:
            base = [b for _, _, b in self.labels[:num_groups]]
            self._base = np.array(base, dtype=np.int64)
            first: dict[int, int] = {}
            for g, b in enumerate(base):
                first.setdefault(b, g)
            self._first = np.array([first[b] for b in range(len(first))], dtype=np.int64)

    def base_view(self, view: PolicyView) -> PolicyView:
        """The view over base groups (requirements): what the policy plans on."""
        sig_matrix = view.sig_matrix
        self._bases(sig_matrix.shape[1])
        merged = self._merged
        if merged is None or merged[0] is not sig_matrix:
            merged = self._merged = (sig_matrix, sig_matrix[:, self._first])
        base = self._base

        def queues() -> tuple[list[int], list[list[float]]]:
            groups, keys = view.group_queues()
            by_base: dict[int, list[float]] = {}
            for g, q in zip(groups, keys, strict=True):
                b = int(base[g])
                have = by_base.get(b)
                by_base[b] = list(q) if have is None else sorted(have + list(q))
            order = sorted(by_base)
            return order, [by_base[b] for b in order]

        scale: dict[int, float] = {}
        for g, x in view.group_scale.items():  # fairness: a base's largest multiplier
            b = int(base[g])
            scale[b] = max(x, scale.get(b, x))
        return PolicyView(merged[1], lambda: view.supply, len(view), queues, scale)

    def replan(self, view: PolicyView) -> None:
        self.inner.replan(self.base_view(view))

    def file(self, tenant_of: Callable[[int], str]) -> None:
        """Charge the takes since the last compile with the shares of the table they were
        made under (before it is compiled anew)."""
        taken = self.taken
        if not taken:
            return
        frac, owed, active = self._frac, self._owed, self._active
        used: dict[str, float] = {}
        due = [0.0] * len(active)
        for idx, count in taken.items():
            tenant = tenant_of(idx)
            if idx < len(frac):
                used[tenant] = used.get(tenant, 0.0) + count * frac[idx]
                if idx < len(owed):
                    for i, x in enumerate(owed[idx]):
                        due[i] += count * x
            else:
                used[tenant] = used.get(tenant, 0.0) + count
        ledger = self.ledger
        for tenant, u in used.items():
            ledger.charge(tenant, u)
        for tenant, o in zip(active, due, strict=True):
            if o:
                ledger.charge(tenant, 0.0, o)
        self.taken = {}

    def charges(self, view: PolicyView, heads: list[int], num_jobs: int, num_tiers: int) -> None:
        """Per head job and device: the part of the supply of the rows it heads that
        another tenant's open round is eligible for, and each tenant's entitlement to
        it (kept while the heads and the contended signatures stay the same)."""
        multi = self._multi
        key = (multi, num_jobs, heads)
        if (
            self._frac_key
            and self._frac_key[0] is multi
            and self._frac_key[1] == num_jobs
            and self._frac_key[2] == heads
        ):
            return
        self._frac_key = key
        if not multi.any():  # nobody contends: what is lent is not owed back
            self._frac = [0.0] * num_jobs
            self._owed = []
            return
        supply = view.supply  # recent check-ins per signature (a device's odds of a row)
        num_sigs = len(multi)
        if len(supply) < num_sigs:
            supply = np.concatenate([supply, np.ones(num_sigs - len(supply))])
        head = np.asarray(heads, dtype=np.int64)[: num_sigs * num_tiers]
        rows = np.repeat(np.arange(num_sigs), num_tiers)[: len(head)]
        ok = head >= 0
        h, r = head[ok], rows[ok]
        w = supply[r] + 1e-9
        total = np.bincount(h, weights=w, minlength=num_jobs)
        shared = np.bincount(h, weights=w * multi[r], minlength=num_jobs)
        where = total > 0
        self._frac = np.divide(shared, total, out=np.ones(num_jobs), where=where).tolist()
        entitled = self._entitled
        owed = np.zeros((num_jobs, entitled.shape[1]))
        for i in range(entitled.shape[1]):
            got = np.bincount(h, weights=w * entitled[r, i], minlength=num_jobs)
            owed[:, i] = np.divide(got, total, out=np.zeros(num_jobs), where=where)
        self._owed = owed.tolist()

    def contended(self, view: PolicyView, groups: list[int], active: list[str]) -> None:
        """The signatures more than one tenant's open jobs are eligible for (kept while
        the groups with open jobs and the eligibility stay the same)."""
        key = (view.sig_matrix, tuple(groups))
        if self._multi_key and self._multi_key[0] is key[0] and self._multi_key[1] == key[1]:
            return
        self._multi_key = key
        self._active = list(active)
        if len(active) <= 1:
            self._multi = np.zeros(0, dtype=bool)
            self._entitled = np.zeros((0, 0))
            return
        labels = self.labels
        index = {t: i for i, t in enumerate(active)}
        owner = np.array([index[labels[g][0]] for g in groups], dtype=np.int64)
        m = view.sig_matrix[:, groups]
        hit = np.zeros((m.shape[0], len(active)), dtype=bool)
        for i in range(len(active)):
            hit[:, i] = m[:, owner == i].any(axis=1)
        self._multi = multi = hit.sum(axis=1) >= 2
        weights = np.array([self.config.weight(t) for t in active]) * hit * multi[:, None]
        sums = weights.sum(axis=1, keepdims=True)
        self._entitled = np.divide(weights, sums, out=np.zeros_like(weights), where=sums > 0)

    def rerank(self, view: PolicyView) -> None:
        """Band the tenants with open demand by their standing now (every compile)."""
        groups = view.group_queues()[0] if len(view) else []
        labels = self.labels
        active = sorted({labels[g][0] for g in groups})
        own: dict[str, set[int]] = {}
        for g in groups:
            own.setdefault(labels[g][0], set()).add(labels[g][1])
        if self.config.key_exponent > 0:
            self.refile = self._key_factors(active) or self.refile
            self.ranks = ranks = dict.fromkeys(active, 0)
        else:
            ranks = rank_tenants(active, self.ledger.used, self.config, self.ledger.owed)
            self.ranks = ranks
        self.contended(view, groups, active)
        # A priority class is ranked among its own tenant's classes only.
        prio_rank = {
            (t, p): r for t, ps in own.items() for r, p in enumerate(sorted(ps, reverse=True))
        }
        classes = max((len(ps) for ps in own.values()), default=1)
        bands = max(ranks.values(), default=0) + 1
        # A group without open jobs has nobody to order (a round request recompiles).
        self._group_rank = np.array(
            [
                ranks[t] * classes + prio_rank[(t, p)] if t in ranks and (t, p) in prio_rank else 0
                for t, p, _ in labels
            ],
            dtype=np.int64,
        )
        self._classes = classes
        self.num_sections = self.inner.num_sections * bands * classes

    def section_table(self, view: PolicyView) -> np.ndarray | None:
        num_sigs, num_groups = view.sig_matrix.shape
        self._bases(num_groups)
        inner = self.inner.section_table(self.base_view(view))
        rank = self._group_rank
        if len(rank) < num_groups:  # groups made after the last ranking
            rank = np.concatenate([rank, np.zeros(num_groups - len(rank), np.int64)])
        rank = rank[:num_groups]
        split = len(self._first) < num_groups
        if not split and not rank.any():
            return inner  # one tenant, one priority class: the policy's own sections
        key = (num_sigs, rank.tobytes(), self.num_sections)
        if self._key == key and self._inner is inner and self._table is not None:
            return self._table
        k = self.inner.num_sections
        classes = self._classes
        bands = self.num_sections // (k * classes)
        band, prio = np.divmod(rank, classes)
        own = (
            inner[:, self._base]
            if inner is not None
            else np.zeros((num_sigs, num_groups), dtype=np.int64)
        )
        # A tenant under its share (band 0) goes first in every section of the policy;
        # the others keep the policy's sections outermost, by band inside each.
        first = own * classes + prio[None, :]
        rest = k * classes + own * ((bands - 1) * classes) + ((band - 1) * classes + prio)[None, :]
        table = np.where((band == 0)[None, :], first, rest).astype(np.int64)
        self._key = key
        self._inner = inner
        self._table = table
        return table
