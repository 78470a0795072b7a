"""Venn schedules Flower, against Flower alone (issue 22): the same three runs of the
example apps on the same eight SuperNodes, started at once, under three arms:

- ``flower``: Flower's own random sampling (each run samples its demand from every node;
  nodes are shared at once; an ineligible pick fails its task);
- ``venn``: Venn's ``venn`` policy chooses every round's nodes (a private `venn up` stack);
- ``random``: Venn's ``random`` policy.

Per arm and repeat: each run's completion time (its ServerApp's start to its end) and
final centralized accuracy, the average completion time, the tasks that shared their node
with another run's task (how often a node served two runs at once) and the tasks that
failed (a node that lacks the run's requirement). The scenario is
`venn.integrations.flower.testbed.scenario` (nodes, runs, emulated node speed).

    .venv/bin/python bench/flower_bench.py                 # 3 arms x 1 repeat, ~20 min
    .venv/bin/python bench/flower_bench.py --repeats 3 --arms venn,flower

Writes docs/results/bench/flower.json (every run of every repeat) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from venn.integrations.flower.testbed.report import tasks_overlapping  # noqa: E402
from venn.integrations.flower.testbed.scenario import ARMS, RUNS, ArmResult, run_arm  # noqa: E402

OUT = ROOT / "docs" / "results" / "bench" / "flower.json"
"""--work-scale S writes flower-xS.json beside it."""


def summary(result: ArmResult, repeat: int, work_scale: float) -> dict[str, object]:
    tasks = sum(len(r.tasks) for r in result.reports)
    return {
        "arm": result.arm,
        "repeat": repeat,
        "work_scale": work_scale,
        "avg_completion_s": round(result.avg_completion_s, 1),
        "wall_s": round(result.wall_s, 1),
        "startup_s": round(result.startup_s, 1),
        "tasks": tasks,
        "tasks_sharing_a_node": tasks_overlapping(result.reports),
        "failed_tasks": sum(r.failed_replies for r in result.reports),
        "runs": {
            r.name: {
                "completion_s": round(r.completion_s, 1),
                "final_accuracy": round(r.final_accuracy, 4),
                "accuracy": [round(a, 4) for a in r.accuracy],
                "tasks": len(r.tasks),
                "failed": r.failed_replies,
                "venn_wait_s": round(
                    sum(v.started_at - v.opened_at for v in r.venn_rounds if v.replied), 1
                ),
                # ServerApp start to its first Venn round: mostly the node directory's
                # query.venn round trip.
                "before_first_round_s": round(
                    min((v.opened_at for v in r.venn_rounds), default=r.started) - r.started, 1
                ),
            }
            for r in result.reports
        },
    }


def table(rows: list[dict[str, object]]) -> str:
    names = [r.name for r in RUNS]
    head = (
        "| arm | avg completion (s) | "
        + " | ".join(f"{n}: s / acc" for n in names)
        + " | tasks sharing a node | failed tasks |"
    )
    lines = [head, "|" + " --- |" * (len(names) + 4)]
    by_arm: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        by_arm.setdefault(str(row["arm"]), []).append(row)
    for arm, group in by_arm.items():
        avg = statistics.mean(float(g["avg_completion_s"]) for g in group)  # type: ignore[arg-type]
        cells = []
        for n in names:
            runs = [g["runs"][n] for g in group]  # type: ignore[index]
            s = statistics.mean(r["completion_s"] for r in runs)
            acc = statistics.mean(r["final_accuracy"] for r in runs)
            cells.append(f"{s:.0f} / {acc:.3f}")
        sharing = sum(int(g["tasks_sharing_a_node"]) for g in group)  # type: ignore[call-overload]
        tasks = sum(int(g["tasks"]) for g in group)  # type: ignore[call-overload]
        failed = sum(int(g["failed_tasks"]) for g in group)  # type: ignore[call-overload]
        lines.append(
            f"| {arm} ({len(group)}x) | {avg:.1f} | "
            + " | ".join(cells)
            + f" | {sharing} of {tasks} | {failed} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--work-scale", type=float, default=1.0, help="x every node's emulated compute time"
    )
    args = parser.parse_args()
    if args.out == OUT and args.work_scale != 1.0:
        args.out = OUT.with_name(f"flower-x{args.work_scale:g}.json")
    arms = [a for a in args.arms.split(",") if a]
    rows: list[dict[str, object]] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="flower-bench-") as tmp:
        for repeat in range(args.repeats):
            for arm in arms:  # interleaved, so a change of machine load hits every arm
                result = run_arm(arm, Path(tmp) / f"{arm}-{repeat}", work_scale=args.work_scale)
                rows.append(summary(result, repeat, args.work_scale))
                print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    meta = {
        "command": "bench/flower_bench.py " + " ".join(sys.argv[1:]),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_at_end": [round(x, 1) for x in load],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(table(rows))
    print(f"load average at the end: {meta['load_average_at_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
