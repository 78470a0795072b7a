"""Venn schedules Flower, end to end: a private Venn stack (`venn up` on free ports), one
SuperLink, eight SuperNodes with different attributes, and three runs of our two example
apps (logistic regression, MLP; numpy, data made on each node from its seed) with
overlapping requirements, started at once. Prints each run's rounds, accuracy and
completion time, and which nodes served which run.

    python examples/flower/demo.py [--arm venn|random|flower] [--dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from venn.integrations.flower.testbed.report import overlaps, served, tasks_overlapping
from venn.integrations.flower.testbed.scenario import ARMS, NODES, RUNS, ArmResult, run_arm


def show(result: ArmResult) -> None:
    print(f"\n== {result.arm}: {len(result.reports)} runs, wall {result.wall_s:.0f} s "
          f"(start-up {result.startup_s:.0f} s)")  # fmt: skip
    specs = {r.name: r for r in RUNS}
    print(f"{'run':<13} {'requires':<9} {'D':>2} {'rounds':>6} {'done in':>8}  accuracy per round")
    for r in result.reports:
        spec = specs[r.name]
        acc = " ".join(f"{a:.2f}" for a in r.accuracy)
        rounds = len(r.accuracy) - 1
        print(f"{r.name:<13} {spec.requirement:<9} {spec.demand:>2} {rounds:>6} "
              f"{r.completion_s:>7.1f}s  {acc}")  # fmt: skip
    print(f"average completion: {result.avg_completion_s:.1f} s")
    table = served(result.reports)
    devices = [n.device_id for n in NODES]
    print("\ntasks per node   " + " ".join(f"{d:>3}" for d in devices))
    for name, counts in table.items():
        print(f"{name:<16} " + " ".join(f"{counts.get(d, 0):>3}" for d in devices))
    print("nodes: " + ", ".join(
        f"{n.device_id} {n.attrs['cpu_f']:g}/{n.attrs['ram']:g} ({n.speed_ms:g} ms)" for n in NODES
    ) + "  [cpu_f/ram (ms per sample)]")  # fmt: skip
    failed = sum(r.failed_replies for r in result.reports)
    pairs = len(overlaps(result.reports))
    print(f"failed tasks (an ineligible node picked): {failed}")
    print(f"tasks that shared their node with another run's: "
          f"{tasks_overlapping(result.reports)} ({pairs} overlapping pairs)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", choices=ARMS, default="venn")
    parser.add_argument("--dir", help="keep logs and reports here (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="venn-flower-") as tmp:
        root = Path(args.dir) if args.dir else Path(tmp)
        result = run_arm(args.arm, root)
        show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
