"""Tenant shares on the simulator: each tenant's share of the devices against its weight
over time, and the average JCT against tenant-blind `venn`.

A Table 1 workload (rounds and arrival gaps x0.1) is dealt to the tenants in arrival order
(job i to tenant i mod n), and run twice on the same trace: with the tenants' weights
(``venn.core.tenants``) and tenant-blind. Time is cut into bins; a bin is *contended*
when every tenant had a round waiting for devices for at least ``--contended`` of it. In
a contended bin each tenant's share of the devices assigned is compared with its weight
over the sum of weights. Writes docs/results/tenants.md (between its markers),
docs/results/tenants.png and docs/results/bench/tenants.json.

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


def run(
    workload: str, jobs: int, scale: float, names: list[str], config: TenantConfig | None
) -> tuple[SimRun, list[tuple[float, str, int]], float]:
    wl = load_workload(workload, jobs=jobs)
    specs = sorted(scale_jobs(wl.jobs, scale, scale), key=lambda j: (j.arrival, j.job_id))
    specs = [dataclasses.replace(j, tenant=names[i % len(names)]) for i, j in enumerate(specs)]
    horizon = horizon_of(wl, "venn", scale)
    cfg = SimConfig(policy="venn", seed=wl.seed, horizon_s=horizon, tenants=config)
    source = trace_for(wl, "synthetic", wl.seed, horizon)
    tiers = tier_model(trace_for(wl, "synthetic", wl.seed, DAY_S), cfg.num_tiers)
    sim = Simulation(specs, source, load_device_profiles(), cfg, tiers)
    history: list[tuple[float, str, int]] = []
    if sim.sched.ledger is not None:
        sim.sched.ledger.history = history
    result = sim.run()
    return result, history, scaled_horizon(wl, scale)


def waiting(run: SimRun, names: list[str], edges: np.ndarray) -> dict[str, np.ndarray]:
    """Per tenant and bin: the fraction of the bin some round of it waited for devices
    (requested and not yet filled nor closed)."""
    out = {t: np.zeros(len(edges) - 1) for t in names}
    for t in names:
        spans = []
        for job in run.jobs:
            if job.spec.tenant != t:
                continue
            for r in job.rounds:
                end = r.filled_at if r.filled_at is not None else r.closed_at
                spans.append((r.requested_at, end if end is not None else edges[-1]))
        spans.sort()
        merged: list[list[float]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for a, b in merged:
            lo = np.clip(edges[:-1], a, b)
            hi = np.clip(edges[1:], a, b)
            out[t] += hi - lo
        out[t] /= np.diff(edges)
    return out


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


def shares(
    history: list[tuple[float, str, int]],
    run: SimRun,
    names: list[str],
    weights: list[float],
    bin_s: float,
    contended_frac: float,
) -> dict[str, Any]:
    end = max((t for t, _, _ in history), default=bin_s)
    edges = np.arange(0.0, end + bin_s, bin_s)
    if len(edges) < 2:
        edges = np.array([0.0, bin_s])
    counts = {t: np.zeros(len(edges) - 1) for t in names}
    for now, tenant, count in history:
        b = min(int(now // bin_s), len(edges) - 2)
        counts[tenant][b] += count
    wait = waiting(run, names, edges)
    contended = np.all([wait[t] >= contended_frac for t in names], axis=0)
    total = sum(counts[t] for t in names)
    contended &= total > 0
    target = np.array(weights) / sum(weights)
    share = {
        t: np.divide(counts[t], total, out=np.zeros_like(total), where=total > 0) for t in names
    }
    agg_total = float(sum(counts[t][contended].sum() for t in names))
    agg = {
        t: float(counts[t][contended].sum() / agg_total) if agg_total else math.nan for t in names
    }
    rel = {t: (agg[t] - target[i]) / target[i] for i, t in enumerate(names)}
    per_bin = np.array(
        [
            [abs(share[t][b] - target[i]) / target[i] for i, t in enumerate(names)]
            for b in np.nonzero(contended)[0]
        ]
    )
    return {
        "edges": edges.tolist(),
        "share": {t: share[t].tolist() for t in names},
        "contended": contended.tolist(),
        "contended_bins": int(contended.sum()),
        "bins": len(edges) - 1,
        "target": {t: float(target[i]) for i, t in enumerate(names)},
        "contended_share": agg,
        "contended_rel_error": rel,
        "bin_within_goal": float(np.mean(per_bin.max(axis=1) <= SHARE_GOAL))
        if len(per_bin)
        else math.nan,
        "total_share": {
            t: float(counts[t].sum() / max(1.0, sum(c.sum() for c in counts.values())))
            for t in names
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["tenants"]["shares"]
    edges = np.array(s["edges"]) / 3600.0
    mid = (edges[:-1] + edges[1:]) / 2
    fig, ax = plt.subplots(figsize=(9, 4))
    for t in s["share"]:
        line = ax.plot(
            mid, s["share"][t], marker=".", label=f"{t} (weight share {s['target'][t]:.2f})"
        )
        ax.axhline(s["target"][t], color=line[0].get_color(), linestyle="--", linewidth=0.8)
    for b, flag in enumerate(s["contended"]):
        if flag:
            ax.axvspan(edges[b], edges[b + 1], color="0.9", zorder=0)
    ax.set_xlabel("simulated hours (grey: every tenant waiting for devices)")
    ax.set_ylabel("share of devices assigned")
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
        f"{result['window_s']:g} s, tolerance {result['tolerance']:g}; bins of "
        f"{result['bin_s']:g} s, contended when every tenant waited for devices "
        f">= {result['contended']:.0%} of the bin ({s['contended_bins']} of {s['bins']} bins).",
        "",
        "| tenant | weight share | share, contended bins | relative error | share, whole run "
        "| share, tenant-blind, contended bins |",
        "|---|---|---|---|---|---|",
    ]
    blind = result["blind"]["shares"]
    for t in s["target"]:
        lines.append(
            f"| {t} | {s['target'][t]:.3f} | {s['contended_share'][t]:.3f} | "
            f"{s['contended_rel_error'][t]:+.1%} | {s['total_share'][t]:.3f} | "
            f"{blind['contended_share'][t]:.3f} |"
        )
    lines += [
        "",
        f"Contended bins where every tenant is within {SHARE_GOAL:.0%} of its weight share: "
        f"{s['bin_within_goal']:.0%}.",
        "",
        "| run | finished | average JCT s (finished) | censored average JCT s |",
        "|---|---|---|---|",
        f"| tenant-blind venn | {b['finished']}/{b['jobs']} | {b['avg_jct_s']:,.0f} | "
        f"{b['censored_avg_jct_s']:,.0f} |",
        f"| venn with tenants | {a['finished']}/{a['jobs']} | {a['avg_jct_s']:,.0f} | "
        f"{a['censored_avg_jct_s']:,.0f} |",
        "",
        f"Goals: shares within {SHARE_GOAL:.0%} of the weights where tenants contend: "
        f"**{'met' if share_ok else 'not met'}**; average JCT within {JCT_GOAL:.0%} of "
        f"tenant-blind venn: **{'met' if abs(jct_change) <= JCT_GOAL else 'not met'}** "
        f"({jct_change:+.1%} finished-only, {cens_change:+.1%} censored).",
        "",
        "![tenant shares](tenants.png)",
        END,
    ]
    return "\n".join(lines)


def write_page(block: str) -> None:
    head = (
        "# Tenant shares on the simulator\n\n"
        "What `bench/tenants_bench.py` measures and how: its docstring. Everything between "
        "the markers is generated; text outside them is kept.\n\n"
    )
    text = PAGE.read_text() if PAGE.exists() else head + BEGIN + "\n" + END + "\n"
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
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
    ap.add_argument("--contended", type=float, default=0.9)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    names = [chr(ord("a") + i) for i in range(len(args.weights))]
    config = TenantConfig(
        {t: TenantShare(w) for t, w in zip(names, args.weights, strict=True)},
        window_s=args.window_s,
        tolerance=args.tolerance,
    )
    # The blind run's shares: the ledger of a layer that never bands (tolerance 1)
    # decides as no tenants at all (tests/pure/test_tenant_policy.py); its JCT is the plain run's.
    blind_cfg = dataclasses.replace(config, tolerance=1.0)
    result: dict[str, Any] = {
        "workload": args.workload,
        "rounds_scale": args.rounds_scale,
        "weights": args.weights,
        "window_s": args.window_s,
        "tolerance": args.tolerance,
        "bin_s": args.bin_s,
        "contended": args.contended,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python bench/tenants_bench.py --workload "
        f"{args.workload} --weights {' '.join(f'{w:g}' for w in args.weights)}",
    }
    for key, cfg in (("tenants", config), ("blind", blind_cfg), ("plain", None)):
        t0 = time.process_time()
        r, history, horizon = run(args.workload, args.jobs, args.rounds_scale, names, cfg)
        result[key] = {"jct": jct(r, horizon), "cpu_s": time.process_time() - t0}
        if cfg is not None:
            result[key]["shares"] = shares(
                history, r, names, args.weights, args.bin_s, args.contended
            )
    # The tenant-blind figures are the plain run's (no tenant layer at all).
    assert result["blind"]["jct"] == result["plain"]["jct"], "a non-banding layer changed decisions"
    table = Table("tenant", "weight share", "contended share", "rel. error", "blind share")
    s, bs = result["tenants"]["shares"], result["blind"]["shares"]
    for t in names:
        table.add_row(
            t,
            f"{s['target'][t]:.3f}",
            f"{s['contended_share'][t]:.3f}",
            f"{s['contended_rel_error'][t]:+.1%}",
            f"{bs['contended_share'][t]:.3f}",
        )
    console = Console()
    console.print(table)
    console.print(
        f"contended bins {s['contended_bins']}/{s['bins']}, "
        f"all within goal: {s['bin_within_goal']:.0%}"
    )
    for key in ("plain", "tenants"):
        console.print(key, result[key]["jct"], f"CPU {result[key]['cpu_s']:.1f} s")
    if args.no_write:
        return
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, PLOT)
    write_page(page_block(result))


if __name__ == "__main__":
    main()
