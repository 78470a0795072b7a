"""Venn schedules Flower, against Flower alone (issue 36): the same Flower runs on the same
SuperNodes under three arms, interleaved within each repeat so a change of machine load
hits them alike:

- ``flower``: Flower alone (each run samples its demand at random from every node: a node
  may serve several runs at once, and an ineligible pick fails its task);
- ``venn``: Venn's ``venn`` policy chooses every round's nodes (a private `venn up` stack,
  the Venn Flower bridge, nodes started by venn-flower's launcher);
- ``random``: Venn's ``random`` policy.

The contended scenario (default; `devtools.flower_testbed.scenario`): 16 SuperNodes
of four CPU classes, RAM sizes and speeds, four runs with overlapping requirements started
15 s apart, more demand than nodes, numpy training with 10-60 s of emulated compute per
task (``--work-scale`` multiplies it). Per arm and repeat: each run's completion (its
ServerApp's start to end) and final centralized accuracy, the tasks that shared their node
with another run's task, the failed tasks, the machine's load average around the arm.

``--overhead`` measures what Venn adds to a round when nothing contends: one run alone on
the 16 nodes, Venn against Flower alone; Venn's own time per round is its acquisition
(round request to the nodes' assignments) plus its close call.

    .venv/bin/python -m bench.flower_bench --repeats 3             # ~90 min
    .venv/bin/python -m bench.flower_bench --overhead --repeats 3  # ~25 min

Writes docs/results/bench/flower.json (every run of every repeat; flower-overhead.json) and
its table into docs/flower.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import write_block
from devtools.flower_testbed.report import RunReport, tasks_overlapping
from devtools.flower_testbed.scenario import (
    ARMS,
    CONTENDED_NODES,
    CONTENDED_RUNS,
    ArmResult,
    RunSpec,
    run_arm,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "bench" / "flower.json"
PAGE = ROOT / "docs" / "flower.md"
# The run config of every run of the benchmark: Flower alone waits for every reply of a
# round as long as Venn's arms may (a shared node's queue can be minutes long).
CONFIG: dict[str, object] = {"round-timeout": 900.0}
OVERHEAD_RUN = RunSpec("logreg-alone", "logreg", "cpu_f=2", demand=3, rounds=10)


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def load() -> float:
    return round(os.getloadavg()[0], 1)


def mean(values: list[float]) -> float:
    return statistics.mean(values) if values else 0.0


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def venn_seconds(report: RunReport) -> list[float]:
    """Venn's own time in each round that trained: acquisition plus the close call."""
    return [
        (v.started_at - v.opened_at) + v.close_s
        for v in report.venn_rounds
        if v.source == "venn" and v.replied
    ]


def summary(result: ArmResult, repeat: int, work_scale: float, load_at: float) -> dict[str, Any]:
    return {
        "arm": result.arm,
        "repeat": repeat,
        "work_scale": work_scale,
        "load_before": load_at,
        "load_after": load(),
        "avg_completion_s": round(result.avg_completion_s, 1),
        "wall_s": round(result.wall_s, 1),
        "startup_s": round(result.startup_s, 1),
        "tasks": sum(len(r.tasks) for r in result.reports),
        "tasks_sharing_a_node": tasks_overlapping(result.reports),
        "failed_tasks": sum(r.failed_replies for r in result.reports),
        "runs": {
            r.name: {
                "completion_s": round(r.completion_s, 1),
                "final_accuracy": round(r.final_accuracy, 4),
                "accuracy": [round(a, 4) for a in r.accuracy],
                "tasks": len(r.tasks),
                "failed": r.failed_replies,
                "rounds": len(r.accuracy) - 1,
                "round_s": round((r.completion_s) / max(1, len(r.accuracy) - 1), 2),
                "venn_s_per_round": round(mean(venn_seconds(r)), 3),
                "sampled_rounds": sum(1 for v in r.venn_rounds if v.source == "flower"),
                # Where a task's time goes: Flower's delivery (sent to the ClientApp's start)
                # and the node's work (start to end), medians.
                "delivery_s": round(median([t.start - t.sent for t in r.tasks]), 2),
                "work_s": round(median([t.end - t.start for t in r.tasks]), 2),
            }
            for r in result.reports
        },
    }


def table(rows: list[dict[str, Any]], names: list[str]) -> str:
    head = (
        "| arm | avg completion (s) | "
        + " | ".join(f"{n}: s / acc" for n in names)
        + " | tasks sharing a node | failed tasks | load (1 min) |"
    )
    lines = [head, "|" + " --- |" * (len(names) + 5)]
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_arm.setdefault(str(row["arm"]), []).append(row)
    for arm, group in by_arm.items():
        avg = mean([float(g["avg_completion_s"]) for g in group])
        spread = [float(g["avg_completion_s"]) for g in group]
        cells = []
        for n in names:
            runs = [g["runs"][n] for g in group]
            s = mean([r["completion_s"] for r in runs])
            acc = mean([r["final_accuracy"] for r in runs])
            cells.append(f"{s:.0f} / {acc:.3f}")
        sharing = sum(int(g["tasks_sharing_a_node"]) for g in group)
        tasks = sum(int(g["tasks"]) for g in group)
        failed = sum(int(g["failed_tasks"]) for g in group)
        loads = [float(g["load_before"]) for g in group] + [float(g["load_after"]) for g in group]
        lines.append(
            f"| {arm} ({len(group)}x) | {avg:.1f} ({min(spread):.0f}-{max(spread):.0f}) | "
            + " | ".join(cells)
            + f" | {sharing} of {tasks} | {failed} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> str:
    by_arm: dict[str, float] = {}
    for arm in ARMS:
        values = [float(r["avg_completion_s"]) for r in rows if r["arm"] == arm]
        if values:
            by_arm[arm] = mean(values)
    if "flower" not in by_arm:
        return ""
    parts = [
        f"`{arm}` {value / by_arm['flower']:.2f}x"
        for arm, value in by_arm.items()
        if arm != "flower"
    ]
    return "Average completion against Flower alone's: " + ", ".join(parts) + "."


def overhead_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| arm | round (s) | Venn's own time per round (s) | rounds | load (1 min) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for arm in ("flower", "venn"):
        group = [r for r in rows if r["arm"] == arm]
        runs = [r["runs"][OVERHEAD_RUN.name] for r in group]
        if not runs:
            continue
        venn = f"{mean([r['venn_s_per_round'] for r in runs]):.2f}" if arm == "venn" else "-"
        loads = [float(g[k]) for g in group for k in ("load_before", "load_after")]
        lines.append(
            f"| {arm} ({len(runs)}x) | {mean([r['round_s'] for r in runs]):.2f} | {venn} | "
            f"{sum(r['rounds'] for r in runs)} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    return "\n".join(lines)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    # SIGTERM (and SIGINT, which a shell's background job ignores) end the arm in progress
    # through its cleanup: its stack and its SuperLink and SuperNodes are stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--work-scale", type=float, default=1.0, help="x every node's compute")
    parser.add_argument("--overhead", action="store_true", help="one run alone, venn vs flower")
    parser.add_argument("--no-page", action="store_true", help="do not write docs/flower.md")
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    runs = [OVERHEAD_RUN] if args.overhead else CONTENDED_RUNS
    if args.overhead:
        arms = [a for a in arms if a in ("flower", "venn")]
    out = args.out or OUT.with_name("flower-overhead.json" if args.overhead else OUT.name)
    rows: list[dict[str, Any]] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="flower-bench-") as tmp:
        for repeat in range(args.repeats):
            order = arms if repeat % 2 == 0 else arms[::-1]  # interleaved, both ways
            for arm in order:
                load_at = load()
                result = run_arm(
                    arm,
                    Path(tmp) / f"{arm}-{repeat}",
                    runs=runs,
                    nodes=CONTENDED_NODES,
                    work_scale=0.05 if args.overhead else args.work_scale,
                    config=CONFIG,
                    timeout_s=3600.0,
                )
                rows.append(summary(result, repeat, args.work_scale, load_at))
                print(json.dumps(rows[-1]), flush=True)
    command = "-m bench.flower_bench " + " ".join(sys.argv[1:])
    meta = {
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "minutes": round((time.time() - started) / 60, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    if args.overhead:
        text = overhead_table(rows)
        block = "flower-overhead"
    else:
        text = table(rows, [r.name for r in runs]) + "\n\n" + ratios(rows)
        block = "flower"
    text = (
        f"`.venv/bin/python {command}` ({meta['started']}, {meta['minutes']} min, "
        f"{meta['machine']}; {shown(out)}):\n\n{text}"
    )
    print(text)
    if not args.no_page:
        write_block(PAGE, block, text, "Venn schedules Flower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
