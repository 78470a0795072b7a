"""Venn schedules Flower, end to end: a private Venn stack (`venn up` on free ports), the
Venn Flower bridge, one SuperLink, eight SuperNodes with different attributes started by
venn-flower's launcher, and three runs of our two example apps (logistic regression, MLP;
numpy, data made on each node from its seed) with overlapping requirements, started at
once. Prints each run's rounds, accuracy and completion time, which nodes served which
run, and Venn's lines of each run's `flwr log`. Every log stays in --dir (default
run/flower-demo/<arm>).

    python examples/flower/demo.py [--arm venn|random|flower] [--secure] [--dir DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devtools.flower_testbed.report import overlaps, served, tasks_overlapping
from devtools.flower_testbed.scenario import ARMS, NODES, RUNS, ArmResult, run_arm

ROOT = Path(__file__).resolve().parents[2]


def venn_lines(root: Path, name: str) -> list[str]:
    """Venn's lines of a run's `flwr log`, kept beside its report."""
    path = root / "flower" / f"run-{name}.log"
    if not path.exists():
        return []
    return [
        line.split("[venn] ", 1)[1] for line in path.read_text().splitlines() if "[venn] " in line
    ]


def show(result: ArmResult, root: Path) -> None:
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
    for r in result.reports:
        lines = venn_lines(root, r.name)
        if lines:
            print(f"\nVenn in `flwr log` of {r.name}:")
            print("\n".join(f"  {line}" for line in lines))
    print(f"\nlogs, reports and each run's flwr log: {root}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", choices=ARMS, default="venn")
    parser.add_argument("--secure", action="store_true", help="TLS and node authentication")
    parser.add_argument("--dir", help="logs and reports (default: run/flower-demo/<arm>)")
    args = parser.parse_args(argv)
    root = Path(args.dir) if args.dir else ROOT / "run" / "flower-demo" / args.arm
    result = run_arm(args.arm, root, secure=args.secure)
    show(result, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
