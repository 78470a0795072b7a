"""The derived figures that the analysis of docs/results/reproduction.md quotes, from the report's
JSON (no simulation): per workload the job mix and its demand on the fleet, and per
policy the unfinished jobs, failed rounds and wasted work behind its mean JCT.

    python -m bench.reproduction_stats [--out docs]

Reads ``<out>/reproduction.json`` (and ``<out>/fairness.json`` when present).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import preamble

DAY_S = 86_400.0


def workload_lines(w: str, res: dict[str, Any], checkins_per_s: float | None) -> list[str]:
    jobs = res["fifo"]["per_job"]
    h = res["fifo"]["censor_at_s"]
    rounds = np.array([j["rounds"] for j in jobs], dtype=float)
    demand = np.array([j["demand"] for j in jobs], dtype=float)
    needed = np.ceil(0.8 * demand) * rounds
    arrivals = np.array([j["arrival"] for j in jobs])
    lines = [
        f"== {w}: H = {h / DAY_S:.0f} days; arrivals over {np.ptp(arrivals) / 3600:.1f} h; "
        f"rounds per job mean {rounds.mean():,.0f} (median {np.median(rounds):,.0f}, "
        f"{rounds.min():,.0f}-{rounds.max():,.0f}); D mean {demand.mean():,.0f}; "
        f"sum D x rounds {(demand * rounds).sum() / 1e6:.1f}M, "
        f"sum ceil(0.8 D) x rounds {needed.sum() / 1e6:.1f}M"
    ]
    iso = [v for v in res.get("isolated", {}).get("jct_by_job", {}).values() if v is not None]
    if iso:
        sd = np.array(iso)
        lines.append(
            f"   job sizes: results needed CV {needed.std() / needed.mean():.2f} (max/min "
            f"{needed.max() / needed.min():.1f}); isolated JCT mean {sd.mean() / DAY_S:.1f} days, "
            f"CV {sd.std() / sd.mean():.2f} (max/min {sd.max() / sd.min():.1f})"
        )
    if checkins_per_s:
        days = (demand * rounds).sum() / checkins_per_s / DAY_S
        lines.append(f"   sum D x rounds = {days:,.0f} days of every check-in of the fleet")
    slack = float(np.mean(h - arrivals))
    for p, r in res.items():
        if p == "isolated" or "per_job" not in r:
            continue
        unfinished = [j for j in r["per_job"] if j["jct"] is None or j["jct"] > h - j["arrival"]]
        tiers = sorted({j["tier"] for j in r["per_job"] if j["jct"] is not None})
        lines.append(
            f"   {p:12s} censored {r['avg_jct_censored_s']:>12,.0f} s "
            f"({r['avg_jct_censored_s'] / slack:.0%} of mean H - a) | unfinished "
            f"{len(unfinished):2d} | failed rounds {r['rounds_failed'] / r['rounds_closed']:.1%} "
            f"| wasted responses / assignments {r['wasted_responses'] / r['assignments']:.1%} "
            f"| assignments {r['assignments'] / 1e6:.1f}M ({r['assignments'] / needed.sum():.2f} "
            f"per result the bound counts) | tiers finished {tiers}"
        )
        makespan = min(r["makespan_s"] or h, h)
        per_tier: dict[int, list[float]] = {}
        for j in r["per_job"]:
            cap = h - j["arrival"]
            per_tier.setdefault(j["tier"], []).append(min(j["jct"], cap) if j["jct"] else cap)
        days = ", ".join(f"{t}: {np.mean(v) / DAY_S:.1f}" for t, v in sorted(per_tier.items()))
        lines.append(
            f"   {'':12s} censored mean / min(makespan, H) "
            f"{r['avg_jct_censored_s'] / makespan:.2f} | censored mean by tier (days) {days}"
        )
        if p in ("random", "random-order") and unfinished:
            share = sum(h - j["arrival"] for j in unfinished) / (50 * r["avg_jct_censored_s"])
            lines.append(
                f"   {'':12s} unfinished jobs' H - a: {share:.0%} of its censored JCT sum; "
                f"unfinished by tier {_count(j['tier'] for j in unfinished)}"
            )
    return lines


def _count(xs: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


def fairness_lines(runs: dict[str, dict[str, Any]]) -> list[str]:
    from venn.sim.fairness_sweep import contenders, sweep_rows

    lines = ["== fairness sweep"]
    for row in sweep_rows(runs):
        w, eps = row["workload"], row["eps"]
        run = runs[w][f"eps={eps:g}"]
        iso = runs[w]["isolated"]["jct_by_job"]
        m = contenders(run["per_job"], run["censor_at_s"])
        # Slowdown: censored JCT over the job's isolated JCT; and over its fair share M_i sd_i.
        slow, of_fair = [], []
        for j in run["per_job"]:
            sd = iso.get(j["id"])
            if not sd:
                continue
            cap = run["censor_at_s"] - j["arrival"]
            jct = min(j["jct"], cap) if j["jct"] is not None else cap
            slow.append(jct / sd)
            of_fair.append(jct / (m[j["id"]] * sd))
        q = np.percentile(slow, [40, 50, 90, 100])
        lines.append(
            f"   {w:5s} eps {eps:<3g} slowdown (censored JCT / isolated) 40th pct {q[0]:.1f}, "
            f"median {q[1]:.1f}, 90th pct {q[2]:.1f}, max {q[3]:.1f}; JCT / fair share median "
            f"{np.median(of_fair):.2f}, max {np.max(of_fair):.2f}"
        )
        lines.append(
            f"   {w:5s} eps {eps:<3g} censored {row['avg_jct_censored_s']:>12,.0f} s | finished "
            f"{row['finished']}/{row['jobs']} | failed rounds "
            f"{run['rounds_failed'] / run['rounds_closed']:.1%} | wasted / assignments "
            f"{run['wasted_responses'] / run['assignments']:.1%} | fair share "
            f"{row['fair_share']:.0%} | mean M {row['mean_m']:.1f}"
        )
    return lines


def supply_lines(workload: str = "even", days: float = 1.0) -> list[str]:
    """The share of the trace's check-ins (its first ``days``) that are *useful* to each
    requirement tier: eligible, and a task of the tier's workload would succeed."""
    from venn.sim.bound import bound_jobs, supply_from_source
    from venn.sim.runner import trace_for
    from venn.traces.devices import load_device_profiles
    from venn.workloads import TIER_NAMES, load_workload

    wl = load_workload(workload, jobs=50)
    bjobs, classes = bound_jobs(wl.jobs)
    horizon = days * DAY_S
    sup = supply_from_source(
        trace_for(wl, "synthetic", wl.seed, horizon), classes, load_device_profiles(), horizon
    )
    tier_of = {b.klass: spec.tier for spec, b in zip(wl.jobs, bjobs, strict=True)}
    shares = ", ".join(
        f"{TIER_NAMES[tier_of[c]]} {np.mean((sup.useful >> c) & 1):.1%}"
        for c in sorted(tier_of, key=lambda c: tier_of[c])
    )
    everyone = np.mean(sup.useful == (1 << len(classes)) - 1)
    alone = ", ".join(
        f"{TIER_NAMES[tier_of[c]]} {np.mean(sup.useful == 1 << c):.1%}"
        for c in sorted(tier_of, key=lambda c: tier_of[c])
    )
    return [
        f"== supply ({workload}, first {days:g} day): {len(sup.time):,} check-ins; useful to "
        f"{shares}; to every tier {everyone:.1%}; to that tier alone: {alone}"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--supply", action="store_true", help="also the trace's tier shares")
    args = parser.parse_args()
    preamble("reproduction_stats")
    if args.supply:
        print("\n".join(supply_lines()))
    data = json.loads((args.out / "reproduction.json").read_text())
    bound_path = args.out / "bound.json"
    rates: dict[str, float] = {}
    if bound_path.is_file():
        for w, b in json.loads(bound_path.read_text())["bounds"].items():
            rates[w] = b["checkins"] / b["horizon_s"]
    print(f"meta {data['meta']}")
    for w, res in data["results"].items():
        rate = rates.get(w)
        if rate is not None and math.isfinite(rate):
            print(f"== {w}: {rate:.2f} check-ins/s over H (bound.json)")
        print("\n".join(workload_lines(w, res, rate)))
    fairness = args.out / "fairness.json"
    if fairness.is_file():
        sweep = json.loads(fairness.read_text())
        if sweep.get("meta") == data["meta"]:
            print("\n".join(fairness_lines(sweep["runs"])))


if __name__ == "__main__":
    main()
