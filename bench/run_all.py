"""`make bench`: run the quick benchmarks, and list the long ones with their commands.

    .venv/bin/python -m bench.run_all            # the quick ones (in process, no broker)
    .venv/bin/python -m bench.run_all --write    # the same, writing docs/results/bench/*.json
    .venv/bin/python -m bench.run_all --list     # every benchmark and its command, nothing run

The quick ones run in this machine's process pool with reduced counts and, unless --write,
publish nothing: their tables are printed to compare with a baseline measured in the same
run (each script's docstring says which). The long ones start brokers and stacks and take
minutes to a quarter of an hour each; run them one at a time, on a quiet machine, with the
command listed (each writes its results under docs/results/; docs/notes/ says how to read
them). Exit status: non-zero if a quick benchmark failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Bench:
    script: str
    measures: str
    quick_args: tuple[str, ...] | None
    """Arguments of the quick run (printing only); None: a long benchmark, listed only."""
    takes: str

    @property
    def module(self) -> str:
        """What runs it from the checkout: ``python -m <module>``."""
        return f"bench.{self.script.removesuffix('.py')}"


BENCHES = (
    Bench("core_bench.py", "plan recompute and check-in decisions of the core (vs FIFO)",
          ("--repeats", "1", "--no-write"), "seconds"),
    Bench("checkin_batch_bench.py", "scheduler CPU per check-in, item by item vs columnar",
          ("--checkins", "5000", "--repeats", "1", "--no-write"), "seconds"),
    Bench("state_memory_bench.py", "memory of a scheduler worker's state, by jobs",
          ("--no-write",), "a minute"),
    Bench("sim_bench.py", "simulator CPU, wall time and memory, fast vs event mode",
          ("--rounds-scale", "0.05", "--no-write"), "a minute or two"),
    Bench("reproduction_stats.py", "derived figures of the reproduction report (no runs)",
          (), "seconds"),
    Bench("pipeline_bench.py", "raw broker rates, pipeline rate, gateway latency to "
          "saturation (Kafka and Tansu)", None, "about 15 minutes (--quick: a few)"),
    Bench("failover_bench.py", "seconds from SIGKILL of the deciding scheduler worker to a "
          "standby's first assignment", None, "about 5 minutes"),
    Bench("fleet_bench.py", "scheduler CPU per second against the emulated fleet's size (10k "
          "to 10M devices, demand fixed)", None, "about 5 minutes"),
    Bench("gateway_bench.py", "gateway CPU per check-in (answered at once, assigned), "
          "saturation and p99 at half of it, against the baseline gateway (bf30edb)", None,
          "about 9 minutes"),
    Bench("gateway_bound_bench.py", "the gateway's answer bound on a starved machine", None,
          "about 3 minutes"),
    Bench("gateway_soak.py", "gateway memory over repeated check-in floods: leak or "
          "high-water", None, "about 3 minutes"),
    Bench("fidelity_bench.py", "pipeline vs simulator average JCT on the same jobs", None,
          "about 4 minutes per policy"),
    Bench("designs_bench.py", "scale-out designs in the simulator: supply reports (A) and "
          "the leased mode (C) against one worker", None, "about 10 minutes (C: 30 more)"),
    Bench("designs_pipeline_bench.py", "scale-out designs in the pipeline (A, B, C) in one "
          "run: scheduler and gateway CPU and broker messages per HTTP check-in", None,
          "about 9 minutes"),
    Bench("estimate_bench.py", "completion estimate at arrival against the actual JCT, "
          "per Table 1 workload", None, "about 3 minutes"),
    Bench("tenants_bench.py", "tenant shares of the devices against their weights, and the "
          "average JCT against tenant-blind venn (simulator)", None, "about 3 minutes"),
    Bench("pace_bench.py", "pace steering in the simulator: venn's average JCT and check-ins, "
          "flat 30 s retry_after against the steered pace, per Table 1 workload", None,
          "hours at x0.1 (event mode)"),
    Bench("bound_slot_bench.py", "the optimality bound's LP against its slot length", None,
          "up to an hour"),
    Bench("flower_bench.py", "four staggered Flower runs on sixteen SuperNodes: Venn against "
          "Flower alone", None, "about 30 minutes a repeat (--overhead: 9)"),
)  # fmt: skip


def command(bench: Bench, write: bool = False) -> list[str]:
    """The quick run's command (with --write, without its --no-write)."""
    args = [a for a in bench.quick_args or () if not (write and a == "--no-write")]
    return [sys.executable, "-m", bench.module, *args]


def listing() -> str:
    lines = ["Long benchmarks (run one at a time, on a quiet machine):"]
    for b in BENCHES:
        if b.quick_args is None:
            lines.append(f"  python -m {b.module:<30} {b.measures}; {b.takes}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run_all",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--write", action="store_true", help="let the quick ones publish")
    parser.add_argument("--list", action="store_true", help="list every benchmark, run none")
    args = parser.parse_args(argv)
    failed = []
    if args.list:
        for b in BENCHES:
            if b.quick_args is not None:
                line = " ".join(["python", *command(b, args.write)[1:]])
                print(f"quick: {line}  ({b.measures}; {b.takes})")
    else:
        for b in BENCHES:
            if b.quick_args is None:
                continue
            print(f"== bench/{b.script}: {b.measures}", flush=True)
            started = time.monotonic()
            code = subprocess.call(command(b, args.write), cwd=ROOT)
            print(f"== bench/{b.script}: exit {code}, {time.monotonic() - started:.0f} s\n")
            if code != 0:
                failed.append(b.script)
    print(listing())
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
