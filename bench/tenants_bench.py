"""Tenant shares on the simulator: each tenant's share of the devices against its weight
over time, and the average JCT against tenant-blind `venn`.

A Table 1 workload (rounds and arrival gaps x0.1) is dealt to the tenants in arrival order
(job i to tenant i mod n), and run twice on the same trace: with the tenants' weights
(``venn.core.tenants``) and tenant-blind. Tenants *contend* for a device when it is
eligible for the waiting rounds (open, demand left) of more than one tenant at the
moment it is assigned; only such devices count. Each contended device entitles each of
its contenders to its weight over the contenders' weights; a tenant's share of the
contended devices is compared with its entitlement (on devices every tenant contends
for, that is its weight over the sum of weights; the page shows both). Time is cut into
bins for the plot and the per-bin figure. Writes docs/results/tenants.md (between its
markers), docs/results/tenants.png and docs/results/bench/tenants.json.

    python bench/tenants_bench.py --workload even --weights 3 2 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from venn.core.tenants import TenantConfig, TenantShare
from venn.report.provenance import git_commit
from venn.sim.engine import SimConfig, SimRun, Simulation
from venn.sim.runner import DAY_S, horizon_of, scale_jobs, scaled_horizon, tier_model, trace_for
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "bench" / "tenants.json"
PAGE = ROOT / "docs" / "results" / "tenants.md"
PLOT = ROOT / "docs" / "results" / "tenants.png"
BEGIN, END = "<!-- tenants:begin -->", "<!-- tenants:end -->"
SHARE_GOAL = 0.10  # relative error of a tenant's share in contended bins
JCT_GOAL = 0.05  # average JCT over tenant-blind venn


class ShareProbe(Simulation):
    """A simulation that files every device it assigns by time bin, tenant and the set
    of tenants whose waiting rounds the device was eligible for (its contenders)."""

    def __init__(self, *args: Any, names: list[str], bin_s: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.names = names
        self.bin_s = bin_s
        n = len(names)
        # [bin, contender set (bit mask), tenant] -> devices assigned
        self.counts = np.zeros((0, 1 << n, n), dtype=np.int64)
        self._masks: tuple[int, np.ndarray] = (-1, np.zeros(0, dtype=np.int64))

    def contenders(self) -> np.ndarray:
        """Per signature, the bit mask of the tenants with a waiting round eligible
        for it (the scheduler's state as of its last compile)."""
        sched = self.sched
        if self._masks[0] != sched.compiles:
            m = sched.index.signature_matrix
            mask = np.zeros(m.shape[0], dtype=np.int64)
            for js in sched.jobs.values():
                if js.round_open and js.remaining > 0:
                    bit = 1 << self.names.index(js.spec.tenant)
                    mask |= m[:, js.group].astype(np.int64) * bit
            self._masks = (sched.compiles, mask)
        return self._masks[1]

    def _account(self, p: Any, stop: int, jobs: int) -> int:
        mask = self.contenders()
        out, _, grouped = p.outputs(len(self._needed_a))
        sig_of = self.sched.index.signature_of_slot
        times = p.batch.time
        for job, kept, _, start in out[:jobs].tolist():
            if kept == 0:
                continue
            t = self.names.index(self.sched.by_idx[job].spec.tenant)
            q = grouped[start : start + kept]
            sigs = sig_of[p.slots[q]]
            m = np.where(sigs < len(mask), mask[np.minimum(sigs, len(mask) - 1)], 0)
            b = (times[q] // self.bin_s).astype(np.int64)
            if b.max() >= self.counts.shape[0]:
                grow = np.zeros((int(b.max()) + 1 - self.counts.shape[0], *self.counts.shape[1:]))
                self.counts = np.concatenate([self.counts, grow.astype(np.int64)])
            np.add.at(self.counts, (b, m, np.full(len(b), t)), 1)
        return super()._account(p, stop, jobs)


def run(
    workload: str,
    jobs: int,
    scale: float,
    names: list[str],
    config: TenantConfig | None,
    bin_s: float,
) -> tuple[SimRun, np.ndarray, float]:
    wl = load_workload(workload, jobs=jobs)
    specs = sorted(scale_jobs(wl.jobs, scale, scale), key=lambda j: (j.arrival, j.job_id))
    specs = [dataclasses.replace(j, tenant=names[i % len(names)]) for i, j in enumerate(specs)]
    horizon = horizon_of(wl, "venn", scale)
    cfg = SimConfig(policy="venn", seed=wl.seed, horizon_s=horizon, tenants=config)
    source = trace_for(wl, "synthetic", wl.seed, horizon)
    tiers = tier_model(trace_for(wl, "synthetic", wl.seed, DAY_S), cfg.num_tiers)
    sim = ShareProbe(specs, source, load_device_profiles(), cfg, tiers, names=names, bin_s=bin_s)
    result = sim.run()
    return result, sim.counts, scaled_horizon(wl, scale)


def jct(run: SimRun, horizon: float) -> dict[str, float]:
    done = [j.jct for j in run.jobs if j.jct is not None]
    censored = [
        min(j.jct, horizon - j.spec.arrival) if j.jct is not None else horizon - j.spec.arrival
        for j in run.jobs
    ]
    return {
        "finished": len(done),
        "jobs": len(run.jobs),
        "avg_jct_s": float(np.mean(done)) if done else math.nan,
        "censored_avg_jct_s": float(np.mean(censored)),
    }


def entitlements(weights: list[float]) -> np.ndarray:
    """[contender set, tenant] -> the tenant's entitlement to one device of that set."""
    n = len(weights)
    out = np.zeros((1 << n, n))
    for m in range(1 << n):
        members = [i for i in range(n) if m >> i & 1]
        if len(members) < 2:
            continue  # nobody contends: no entitlement, not counted
        total = sum(weights[i] for i in members)
        for i in members:
            out[m, i] = weights[i] / total
    return out


def shares(
    counts: np.ndarray, names: list[str], weights: list[float], bin_s: float, min_bin: int
) -> dict[str, Any]:
    """Shares of the contended devices against the entitlements, overall and per bin
    (bins with at least ``min_bin`` contended devices)."""
    n = len(names)
    ent = entitlements(weights)
    contended = ent.sum(axis=1) > 0  # contender sets of 2+ tenants
    full = (1 << n) - 1
    per_set = counts.sum(axis=0)  # [set, tenant]
    got = per_set[contended].sum(axis=0).astype(float)
    owed = (per_set[contended].sum(axis=1)[:, None] * ent[contended]).sum(axis=0)
    all_got = per_set[full].astype(float)
    total = float(counts.sum())
    by_bin_got = counts[:, contended, :].sum(axis=1).astype(float)  # [bin, tenant]
    by_bin_owed = np.einsum("bs,st->bt", counts[:, contended, :].sum(axis=2), ent[contended])
    devices = by_bin_got.sum(axis=1)
    ok = devices >= min_bin
    safe = np.maximum(devices, 1)[:, None]
    share_bin = by_bin_got / safe
    owed_bin = by_bin_owed / safe
    err_bin = np.abs(share_bin - owed_bin) / np.maximum(owed_bin, 1e-12)
    target = np.array(weights) / sum(weights)
    return {
        "bin_s": bin_s,
        "edges": (np.arange(counts.shape[0] + 1) * bin_s).tolist(),
        "share": {t: share_bin[:, i].tolist() for i, t in enumerate(names)},
        "entitled": {t: owed_bin[:, i].tolist() for i, t in enumerate(names)},
        "counted_bins": ok.tolist(),
        "target": {t: float(target[i]) for i, t in enumerate(names)},
        "contended_fraction": float(got.sum() / total) if total else math.nan,
        "all_contended_fraction": float(all_got.sum() / total) if total else math.nan,
        "contended_share": {t: float(got[i] / got.sum()) for i, t in enumerate(names)},
        "entitled_share": {t: float(owed[i] / owed.sum()) for i, t in enumerate(names)},
        "contended_rel_error": {
            t: float(got[i] / owed[i] - 1) if owed[i] else math.nan for i, t in enumerate(names)
        },
        "all_contended_share": {t: float(all_got[i] / all_got.sum()) for i, t in enumerate(names)},
        "all_contended_rel_error": {
            t: float(all_got[i] / all_got.sum() / target[i] - 1) for i, t in enumerate(names)
        },
        "bins": int(ok.sum()),
        "bin_within_goal": float(np.mean(err_bin[ok].max(axis=1) <= SHARE_GOAL))
        if ok.any()
        else math.nan,
        "total_share": {
            t: float(counts[..., i].sum() / max(1.0, total)) for i, t in enumerate(names)
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["tenants"]["shares"]
    edges = np.array(s["edges"]) / 3600.0
    mid = (edges[:-1] + edges[1:]) / 2
    ok = np.array(s["counted_bins"], dtype=bool)
    fig, ax = plt.subplots(figsize=(9, 4))
    for t in s["share"]:
        share = np.where(ok, s["share"][t], np.nan)
        owed = np.where(ok, s["entitled"][t], np.nan)
        line = ax.plot(mid, share, marker=".", label=f"{t} (weight share {s['target'][t]:.2f})")
        ax.plot(mid, owed, color=line[0].get_color(), linestyle="--", linewidth=0.8)
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("share of contended devices (dashed: entitled)")
    ax.set_ylim(0, 1)
    ax.set_title(f"Tenant shares, {result['workload']} (rounds x{result['rounds_scale']:g})")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def page_block(result: dict[str, Any]) -> str:
    s = result["tenants"]["shares"]
    a, b = result["tenants"]["jct"], result["blind"]["jct"]
    jct_change = a["avg_jct_s"] / b["avg_jct_s"] - 1
    cens_change = a["censored_avg_jct_s"] / b["censored_avg_jct_s"] - 1
    share_ok = all(abs(v) <= SHARE_GOAL for v in s["contended_rel_error"].values())
    lines = [
        BEGIN,
        f"Generated by `{result['command']}` (commit {result['commit']}, {result['date']}).",
        "",
        f"Workload `{result['workload']}`, {a['jobs']} jobs, rounds and arrival gaps "
        f"x{result['rounds_scale']:g}, tenants {', '.join(s['target'])} with weights "
        f"{', '.join(f'{w:g}' for w in result['weights'])}, share window "
        f"{result['window_s']:g} s, tolerance {result['tolerance']:g}. Contended devices "
        f"(eligible for more than one tenant's waiting round when assigned): "
        f"{s['contended_fraction']:.1%} of the devices assigned, "
        f"{s['all_contended_fraction']:.1%} wanted by every tenant.",
        "",
        "| tenant | weight share | entitled share, contended devices | share, contended "
        "devices | relative error | share, devices every tenant wanted | relative error "
        "| share, whole run | tenant-blind: share, contended devices (entitled) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    blind = result["blind"]["shares"]
    for t in s["target"]:
        lines.append(
            f"| {t} | {s['target'][t]:.3f} | {s['entitled_share'][t]:.3f} | "
            f"{s['contended_share'][t]:.3f} | {s['contended_rel_error'][t]:+.1%} | "
            f"{s['all_contended_share'][t]:.3f} | {s['all_contended_rel_error'][t]:+.1%} | "
            f"{s['total_share'][t]:.3f} | {blind['contended_share'][t]:.3f} "
            f"({blind['entitled_share'][t]:.3f}) |"
        )
    lines += [
        "",
        f"Bins of {result['bin_s']:g} s with at least {result['min_bin']:,} contended devices: "
        f"{s['bins']}; in {s['bin_within_goal']:.0%} of them every tenant is within "
        f"{SHARE_GOAL:.0%} of its entitled share.",
        "",
        "| run | finished | average JCT s (finished) | censored average JCT s | CPU s |",
        "|---|---|---|---|---|",
        f"| tenant-blind venn | {b['finished']}/{b['jobs']} | {b['avg_jct_s']:,.0f} | "
        f"{b['censored_avg_jct_s']:,.0f} | {result['plain']['cpu_s']:.1f} |",
        f"| venn with tenants | {a['finished']}/{a['jobs']} | {a['avg_jct_s']:,.0f} | "
        f"{a['censored_avg_jct_s']:,.0f} | {result['tenants']['cpu_s']:.1f} |",
        "",
        f"Goals: shares within {SHARE_GOAL:.0%} of the entitled shares on contended "
        f"devices: **{'met' if share_ok else 'not met'}**; average JCT within "
        f"{JCT_GOAL:.0%} of tenant-blind venn: "
        f"**{'met' if abs(jct_change) <= JCT_GOAL else 'not met'}** "
        f"({jct_change:+.1%} finished-only, {cens_change:+.1%} censored).",
        "",
        f"![tenant shares]({result['plot']})",
        END,
    ]
    return "\n".join(lines)


def markers(suffix: str) -> tuple[str, str]:
    """The markers of one run's block (the default run's, or another workload's)."""
    return f"<!-- tenants{suffix}:begin -->", f"<!-- tenants{suffix}:end -->"


def write_page(block: str, suffix: str = "") -> None:
    """Put ``block`` between its markers; another workload's block, new to the page,
    goes right after the default one."""
    head = (
        "# Tenant shares on the simulator\n\n"
        "What `bench/tenants_bench.py` measures and how: its docstring. Everything between "
        "the markers is generated; text outside them is kept.\n\n"
    )
    text = PAGE.read_text() if PAGE.exists() else head + BEGIN + "\n" + END + "\n"
    begin, end = markers(suffix)
    block = block.replace(BEGIN, begin).replace(END, end)
    if begin not in text:
        text = text.replace(END, END + "\n\n" + begin + "\n" + end, 1)
    before, rest = text.split(begin, 1)
    after = rest.split(end, 1)[1]
    PAGE.write_text(before + block + after)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="even")
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--rounds-scale", type=float, default=0.1)
    ap.add_argument("--weights", type=float, nargs="+", default=[3.0, 2.0, 1.0])
    ap.add_argument("--window-s", type=float, default=TenantConfig().window_s)
    ap.add_argument("--tolerance", type=float, default=TenantConfig().tolerance)
    ap.add_argument("--bin-s", type=float, default=6 * 3600.0)
    ap.add_argument("--min-bin", type=int, default=1000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    names = [chr(ord("a") + i) for i in range(len(args.weights))]
    config = TenantConfig(
        {t: TenantShare(w) for t, w in zip(names, args.weights, strict=True)},
        window_s=args.window_s,
        tolerance=args.tolerance,
    )
    # The blind run's shares: a layer that never bands (an infinite tolerance) decides
    # as no tenants at all (tests/pure/test_tenant_policy.py); its JCT is the plain run's.
    blind_cfg = dataclasses.replace(config, tolerance=math.inf)
    default = args.workload == "even" and args.weights == [3.0, 2.0, 1.0]
    suffix = "" if default else f"-{args.workload}"
    result: dict[str, Any] = {
        "workload": args.workload,
        "rounds_scale": args.rounds_scale,
        "weights": args.weights,
        "window_s": args.window_s,
        "tolerance": args.tolerance,
        "bin_s": args.bin_s,
        "min_bin": args.min_bin,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d"),
        "plot": f"tenants{suffix}.png",
        "command": "python bench/tenants_bench.py --workload "
        f"{args.workload} --weights {' '.join(f'{w:g}' for w in args.weights)}",
    }
    for key, cfg in (("tenants", config), ("blind", blind_cfg), ("plain", None)):
        t0 = time.process_time()
        r, counts, horizon = run(
            args.workload, args.jobs, args.rounds_scale, names, cfg, args.bin_s
        )
        result[key] = {"jct": jct(r, horizon), "cpu_s": time.process_time() - t0}
        if cfg is not None:
            result[key]["shares"] = shares(counts, names, args.weights, args.bin_s, args.min_bin)
    # The tenant-blind figures are the plain run's (no tenant layer at all).
    assert result["blind"]["jct"] == result["plain"]["jct"], "a non-banding layer changed decisions"
    table = Table("tenant", "entitled", "contended share", "rel. error", "blind share")
    s, bs = result["tenants"]["shares"], result["blind"]["shares"]
    for t in names:
        table.add_row(
            t,
            f"{s['entitled_share'][t]:.3f}",
            f"{s['contended_share'][t]:.3f}",
            f"{s['contended_rel_error'][t]:+.1%}",
            f"{bs['contended_share'][t]:.3f}",
        )
    console = Console()
    console.print(table)
    console.print(f"bins {s['bins']}, all within goal: {s['bin_within_goal']:.0%}")
    for key in ("plain", "tenants"):
        console.print(key, result[key]["jct"], f"CPU {result[key]['cpu_s']:.1f} s")
    if args.no_write:
        return
    out = OUT.with_name(f"tenants{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, PLOT.with_name(result["plot"]))
    write_page(page_block(result), suffix)


if __name__ == "__main__":
    main()
