"""``venn reproduce --bound``: the optimality bound of ``venn.sim.bound`` per workload, and
how far every policy of the report is above it.

Writes ``<out>/bound.json``; the report (``venn.sim.reproduce``) shows, per workload, the
bound on the censored mean JCT, the bound without contention (every job alone, E_j) and
each policy's censored mean JCT divided by the bound (its *gap*: 1.00 would be optimal).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from venn.sim.bound import bound_jobs, lp_bound, supply_from_source
from venn.sim.runner import scale_jobs, scaled_horizon, trace_for
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload

SLOT_S = 3600.0


def workload_bound(
    workload: str, jobs: int, rounds_scale: float, arrival_scale: float, slot_s: float = SLOT_S
) -> dict[str, Any]:
    """The bound for one workload, on the trace and horizon the report's runs use."""
    wl = load_workload(workload, jobs=jobs)
    specs = scale_jobs(wl.jobs, rounds_scale, arrival_scale)
    horizon = scaled_horizon(wl, rounds_scale)
    started = time.perf_counter()
    bjobs, classes = bound_jobs(specs)
    source = trace_for(wl, "synthetic", wl.seed, horizon)
    supply = supply_from_source(source, classes, load_device_profiles(), horizon)
    result = lp_bound(bjobs, supply, horizon, slot_s)
    return {
        "workload": workload,
        "horizon_s": horizon,
        "slot_s": slot_s,
        "slots": result.slots,
        "checkins": len(supply.time),
        "lp_mean_s": result.lp_mean_s,
        "alone_mean_s": result.alone_mean_s,
        "alone_unfinished": sum(1 for e in result.earliest_s if e >= horizon),
        "status": result.status,
        "seconds": time.perf_counter() - started,
    }


def run_bounds(
    out: Path,
    workloads: Sequence[str],
    jobs: int,
    rounds_scale: float,
    arrival_scale: float,
    console: Console,
    slot_s: float = SLOT_S,
) -> dict[str, dict[str, Any]]:
    """Compute the bound of every workload and save ``<out>/bound.json``."""
    meta = {"jobs": jobs, "rounds_scale": rounds_scale, "arrival_scale": arrival_scale}
    path = out / "bound.json"
    bounds: dict[str, dict[str, Any]] = {}
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("meta") == meta:
            bounds = data["bounds"]
    out.mkdir(parents=True, exist_ok=True)
    for w in workloads:
        if w in bounds and bounds[w]["slot_s"] == slot_s:
            continue
        console.print(f"bound: {w} ...")
        bounds[w] = workload_bound(w, jobs, rounds_scale, arrival_scale, slot_s)
        console.print(
            f"bound: {w}: {bounds[w]['lp_mean_s']:,.0f} s ({bounds[w]['seconds']:.0f} s to solve)"
        )
        path.write_text(json.dumps({"meta": meta, "bounds": bounds}, indent=1))
    return bounds


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"


def report_section(
    bounds: dict[str, dict[str, Any]],
    results: dict[str, dict[str, dict[str, Any]]],
    policies: Sequence[str],
    meta: dict[str, Any],
) -> list[str]:
    """The "Optimality bound" section of docs/results/reproduction.md (generated)."""
    rs, jobs = meta["rounds_scale"], meta["jobs"]
    slots = sorted({float(b.get("slot_s", SLOT_S)) for b in bounds.values()})
    option = f" --bound-slot-s {slots[0]:g}" if len(slots) == 1 and slots[0] != SLOT_S else ""
    solved = ", ".join(
        f"{w} {b['slots']:,} slots in {b['seconds']:.0f} s"
        for w, b in bounds.items()
        if "slots" in b and "seconds" in b
    )
    lines = [
        "## Optimality bound",
        "",
        f"Command: `venn reproduce --bound --jobs {jobs} --rounds-scale {rs}{option}` "
        "(`venn/sim/bound.py`). A lower bound on the censored mean JCT that *any* policy, "
        "one that knows the future included, can reach on the same trace and horizon H: "
        "the optimum of a relaxation of the simulator's rules, solved as an LP by HiGHS "
        "(scipy). What it keeps, and what it drops:",
        "",
        "- a finished job has received R x k results (k = ceil(0.8 D) per round), each from "
        "a distinct check-in that is eligible for it, arrives after it does and whose task "
        "succeeds; failed rounds, the extra D - k devices and stragglers are free;",
        f"- per slot of the time grid ({' / '.join(_hours(x) for x in slots)}, plus every "
        "arrival) the results of all jobs fit the slot's useful check-ins (a transportation "
        "problem from device kinds to requirement classes); the order of check-ins inside a "
        "slot is dropped;",
        "- a job completes no earlier than E_j, its earliest completion with the whole trace "
        "to itself (each round closing at the k-th earliest result after its request, no "
        "deadline, no D cap), and receives no more results before a time than the rounds "
        "that could have been requested by then can hold;",
        "- completion times are time-indexed LP variables: the slot of a job's last result "
        "is fractional, the results it has by slot k are at least R x k times the "
        "probability that it is done by k, and it takes nothing after its last result.",
        "",
        "Every inequality holds for any slot length (the arrivals are slot boundaries), so a "
        "coarser slot gives a smaller LP and a weaker bound, never an invalid one "
        '(`venn/sim/bound.py`, "Any slot length").'
        + (f" LP sizes and solve times: {solved}." if solved else ""),
        "",
        'Each cell under a policy is its censored mean JCT (section "Absolute figures") '
        "divided by the bound: 1.00 would be optimal. *alone* is the bound without "
        "contention (mean of min(E_j, H) - a_j); *isolated* the simulated isolated runs "
        "(FIFO with every job alone), which an omniscient policy can beat.",
        "",
        "| workload | bound (s) | alone (s) | isolated (s) | " + " | ".join(policies) + " |",
        "| --- | --- | --- | --- |" + " --- |" * len(policies),
    ]
    for w, b in bounds.items():
        res = results.get(w, {})
        iso = res.get("isolated", {}).get("jct_by_job", {})
        vals = [v for v in iso.values() if v is not None]
        iso_mean = f"{sum(vals) / len(vals):,.0f}" if vals else "-"
        cells = []
        for p in policies:
            avg = res.get(p, {}).get("avg_jct_censored_s")
            cells.append(f"{avg / b['lp_mean_s']:.2f}" if avg and b["lp_mean_s"] else "-")
        lines.append(
            f"| {w} | {b['lp_mean_s']:,.0f} | {b['alone_mean_s']:,.0f} | {iso_mean} | "
            + " | ".join(cells)
            + " |"
        )
    lines.append("")
    return lines
