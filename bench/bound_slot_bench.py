"""The optimality bound's LP (venn.sim.bound) against its slot length, on one workload:
LP size, solve time, peak memory and the bound itself, to choose ``--bound-slot-s``.

    python -m bench.bound_slot_bench --workload even --rounds-scale 1.0 \
        --slots 86400,43200,21600,14400

A coarser slot is still a valid bound (bound.py, "Any slot length"), only a weaker one.
Each solve is capped by ``--time-limit`` (HiGHS); a capped solve is reported, not used.
"""

from __future__ import annotations

import argparse
import resource
import time
from typing import Any

import venn.sim.bound as bound_module
from bench.common import preamble
from venn.sim.bound import bound_jobs, lp_bound, supply_from_source
from venn.sim.runner import scale_jobs, scaled_horizon, trace_for
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="even")
    parser.add_argument("--rounds-scale", type=float, default=1.0)
    parser.add_argument(
        "--slots", default="86400,43200,21600,14400", help="seconds, comma-separated"
    )
    parser.add_argument("--time-limit", type=float, default=900.0, help="per solve, seconds")
    args = parser.parse_args()
    preamble("bound_slot_bench")

    real_milp = bound_module.milp
    size: dict[str, Any] = {}

    def milp(c: Any, constraints: Any, bounds: Any, options: dict[str, Any]) -> Any:
        size["vars"], size["rows"], size["nnz"] = (
            constraints.A.shape[1],
            constraints.A.shape[0],
            constraints.A.nnz,
        )
        started = time.perf_counter()
        res = real_milp(
            c,
            constraints=constraints,
            bounds=bounds,
            options={**options, "time_limit": args.time_limit},
        )
        size["solve"] = time.perf_counter() - started
        return res

    bound_module.milp = milp  # type: ignore[assignment]
    wl = load_workload(args.workload, jobs=50)
    specs = scale_jobs(wl.jobs, args.rounds_scale, args.rounds_scale)
    horizon = scaled_horizon(wl, args.rounds_scale)
    started, cpu = time.perf_counter(), time.process_time()
    jobs, classes = bound_jobs(specs)
    source = trace_for(wl, "synthetic", wl.seed, horizon)
    supply = supply_from_source(source, classes, load_device_profiles(), horizon)
    print(
        f"{args.workload} x{args.rounds_scale:g}: H {horizon:,.0f} s, {len(supply.time):,} "
        f"check-ins, {len(classes)} classes; supply {time.perf_counter() - started:.0f} s wall, "
        f"{time.process_time() - cpu:.0f} s CPU; peak {_peak_gb():.2f} GB",
        flush=True,
    )
    for slot_s in (float(s) for s in args.slots.split(",")):
        started, cpu = time.perf_counter(), time.process_time()
        try:
            r = lp_bound(jobs, supply, horizon, slot_s)
            what = f"bound {r.lp_mean_s:,.0f} s (alone {r.alone_mean_s:,.0f} s), {r.slots} slots"
        except RuntimeError as e:
            what = f"not solved: {e}"
        print(
            f"slot {slot_s / 3600:g} h: {what}; LP {size.get('vars')} variables, "
            f"{size.get('rows')} rows, {size.get('nnz')} non-zeros; solve "
            f"{size.get('solve', 0):.0f} s, all {time.perf_counter() - started:.0f} s wall "
            f"{time.process_time() - cpu:.0f} s CPU; peak {_peak_gb():.2f} GB",
            flush=True,
        )


if __name__ == "__main__":
    main()
