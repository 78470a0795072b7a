"""``venn reproduce``: every policy over the paper's Table 1 workloads.

Writes ``<out>/reproduction.md`` (our speed-ups over Random beside the paper's) and PNG
plots (JCT CDF per policy, speed-up bars per workload).
"""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from venn.sim.engine import SimConfig
from venn.sim.metrics import summarise
from venn.sim.runner import horizon_of, isolated_jcts, run_jobs, trace_for
from venn.traces.checkins import CheckinSource
from venn.workloads import load_workload

TABLE1_WORKLOADS = ("even", "small", "large", "low", "high")
POLICY_ORDER = ("random", "fifo", "srsf", "venn-sched", "venn-match", "venn")
PAPER_SPEEDUP: dict[str, dict[str, float]] = {
    "even": {"fifo": 1.38, "srsf": 1.69, "venn": 1.87},
    "small": {"fifo": 1.48, "srsf": 1.68, "venn": 1.78},
    "large": {"fifo": 1.64, "srsf": 1.57, "venn": 1.72},
    "low": {"fifo": 1.55, "srsf": 1.66, "venn": 1.88, "venn-match": 1.62, "venn-sched": 1.79},
    "high": {"fifo": 1.42, "srsf": 1.41, "venn": 1.63, "venn-match": 1.42, "venn-sched": 1.63},
}


def _one(workload: str, policy: str, jobs: int, rounds_scale: float) -> dict[str, Any]:
    wl = load_workload(workload, jobs=jobs)
    specs = [dataclasses.replace(j, rounds=max(1, round(j.rounds * rounds_scale))) for j in wl.jobs]
    horizon = horizon_of(wl, policy)

    def source_for(h: float) -> CheckinSource:
        return trace_for(wl, "synthetic", wl.seed, h)

    cfg = SimConfig(policy=policy, seed=wl.seed, horizon_s=horizon)
    run = run_jobs(specs, source_for, cfg)
    isolated = isolated_jcts(specs, source_for, cfg) if policy == "fifo" else None
    out = summarise(run, isolated, {"workload": workload})
    out["jcts"] = [j.jct for j in run.jobs if j.jct is not None]
    return out


def run_reproduction(
    workloads: list[str] | None,
    jobs: int,
    processes: int,
    out: Path,
    rounds_scale: float,
    console: Console,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Run every (workload, policy) pair, print the table, write the report and plots."""
    names = list(workloads or TABLE1_WORKLOADS)
    tasks = [(w, p) for w in names for p in POLICY_ORDER]
    results: dict[str, dict[str, dict[str, Any]]] = {w: {} for w in names}
    with Progress(console=console) as progress, ProcessPoolExecutor(processes) as pool:
        bar = progress.add_task("simulating", total=len(tasks))
        futures = {pool.submit(_one, w, p, jobs, rounds_scale): (w, p) for w, p in tasks}
        for fut in as_completed(futures):
            w, p = futures[fut]
            results[w][p] = fut.result()
            progress.advance(bar)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reproduction.json").write_text(json.dumps(results, indent=1))
    table = speedup_table(results)
    console.print(table)
    write_report(results, out, jobs, rounds_scale)
    plot(results, out)
    return results


def speedup(results: dict[str, dict[str, Any]], policy: str) -> float | None:
    base = results.get("random", {}).get("avg_jct_s")
    mine = results.get(policy, {}).get("avg_jct_s")
    return base / mine if base and mine else None


def speedup_table(results: dict[str, dict[str, dict[str, Any]]]) -> Table:
    table = Table(title="Average-JCT speed-up over Random (ours / paper)")
    table.add_column("workload")
    for p in POLICY_ORDER[1:]:
        table.add_column(p, justify="right")
    for w, res in results.items():
        row = [w]
        for p in POLICY_ORDER[1:]:
            s = speedup(res, p)
            paper = PAPER_SPEEDUP.get(w, {}).get(p)
            cell = f"{s:.2f}" if s else "-"
            row.append(cell + (f" / {paper:.2f}" if paper else ""))
        table.add_row(*row)
    return table


def write_report(
    results: dict[str, dict[str, dict[str, Any]]], out: Path, jobs: int, rounds_scale: float
) -> None:
    lines = [
        "# Reproduction of the paper's Table 1",
        "",
        f"Command: `venn reproduce --jobs {jobs} --rounds-scale {rounds_scale}` "
        "(synthetic trace, workload seeds from the YAMLs).",
        "",
        "## Average-JCT speed-up over Random (ours / paper)",
        "",
        "| workload | " + " | ".join(POLICY_ORDER[1:]) + " |",
        "| --- |" + " --- |" * (len(POLICY_ORDER) - 1),
    ]
    for w, res in results.items():
        cells = []
        for p in POLICY_ORDER[1:]:
            s = speedup(res, p)
            paper = PAPER_SPEEDUP.get(w, {}).get(p)
            cell = f"{s:.2f}" if s else "-"
            if paper:
                cell += f" / {paper:.2f}"
            cells.append(cell)
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    lines += ["", "## Absolute figures", ""]
    lines.append(
        "| workload | policy | finished | avg JCT (s) | avg sched delay (s) | "
        "avg response (s) | failed rounds | isolated avg JCT (s) |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for w, res in results.items():
        iso = res.get("fifo", {}).get("isolated_avg_jct_s")
        for p in POLICY_ORDER:
            r = res.get(p)
            if not r:
                continue
            lines.append(
                f"| {w} | {p} | {r['jobs_finished']}/{r['jobs_total']} | "
                f"{_fmt(r['avg_jct_s'])} | {_fmt(r['avg_sched_delay_s'])} | "
                f"{_fmt(r['avg_response_s'])} | {r['rounds_failed']} | {_fmt(iso)} |"
            )
    (out / "reproduction.md").write_text("\n".join(lines) + "\n")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def plot(results: dict[str, dict[str, dict[str, Any]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for w, res in results.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        for p in POLICY_ORDER:
            jcts = np.sort(np.asarray(res.get(p, {}).get("jcts", []), dtype=float))
            if len(jcts):
                ax.plot(jcts / 3600, np.arange(1, len(jcts) + 1) / len(jcts), label=p)
        ax.set_xlabel("JCT (hours)")
        ax.set_ylabel("CDF of jobs")
        ax.set_title(f"JCT CDF, {w} workload")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"jct_cdf_{w}.png", dpi=100)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / (len(POLICY_ORDER) - 1)
    xs = np.arange(len(results))
    for k, p in enumerate(POLICY_ORDER[1:]):
        vals = [speedup(res, p) or 0.0 for res in results.values()]
        ax.bar(xs + k * width, vals, width, label=p)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(xs + width * (len(POLICY_ORDER) - 2) / 2, list(results))
    ax.set_ylabel("avg JCT speed-up over Random")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "speedup.png", dpi=100)
    plt.close(fig)
