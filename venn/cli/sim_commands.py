"""``venn sim`` and ``venn reproduce``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from venn.core.registry import POLICIES

console = Console()


def sim(
    workload: Annotated[
        str, typer.Option(help="even|small|large|low|high or a YAML path")
    ] = "even",
    policy: Annotated[str, typer.Option(help=f"one of: {', '.join(POLICIES)}")] = "venn",
    jobs: Annotated[int, typer.Option(min=1, help="jobs drawn from the workload")] = 50,
    seed: Annotated[int | None, typer.Option(help="overrides the workload's RANDOMSEED")] = None,
    trace: Annotated[str, typer.Option(help="'synthetic' or a FedScale CSV path")] = "synthetic",
    mode: Annotated[str, typer.Option(help="fast (numpy batches) or event (reference)")] = "fast",
    tiers: Annotated[int, typer.Option(min=2, max=4, help="capacity tiers V")] = 3,
    eps: Annotated[float, typer.Option(min=0.0, help="fairness knob epsilon")] = 0.0,
    isolated: Annotated[bool, typer.Option(help="also run every job alone")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    rounds_scale: Annotated[
        float, typer.Option(help="scale every job's rounds and the horizon")
    ] = 1.0,
    arrival_scale: Annotated[
        float | None,
        typer.Option(help="scale inter-arrival gaps (default: --rounds-scale)"),
    ] = None,
) -> None:
    """Simulate a workload on a device trace under one policy."""
    if policy not in POLICIES:
        raise typer.BadParameter(f"unknown policy {policy!r}", param_hint="--policy")
    if rounds_scale <= 0 or (arrival_scale is not None and arrival_scale <= 0):
        raise typer.BadParameter("scales must be positive")
    if mode not in ("fast", "event"):
        raise typer.BadParameter("mode must be fast or event", param_hint="--mode")
    # Imported here: the simulator loads numba, which every other command can do without.
    from venn.sim.runner import SimRequest, simulate

    req = SimRequest(
        workload,
        policy,
        jobs,
        seed,
        trace,
        mode,  # type: ignore[arg-type]
        tiers,
        eps,
        isolated,
        rounds_scale,
        arrival_scale,
    )
    result = simulate(req)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(
        title=f"{result['workload']} / {policy} ({result['jobs_finished']} of "
        f"{result['jobs_total']} jobs finished)"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.items():
        if isinstance(value, float):
            table.add_row(key, f"{value:,.1f}")
        elif isinstance(value, dict):
            inner = ", ".join(
                f"{k}={v:,.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items()
            )
            table.add_row(key, inner)
        else:
            table.add_row(key, str(value))
    console.print(table)


def reproduce(
    workloads: Annotated[list[str] | None, typer.Option(help="subset of Table 1 workloads")] = None,
    jobs: Annotated[int, typer.Option(min=1)] = 50,
    processes: Annotated[int, typer.Option(min=1)] = 2,
    out: Annotated[Path, typer.Option(help="where the report and plots go")] = Path("docs/results"),
    rounds_scale: Annotated[
        float,
        typer.Option(help="scale every job's rounds and the horizon"),
    ] = 1.0,
    arrival_scale: Annotated[
        float | None,
        typer.Option(help="scale inter-arrival gaps (default: --rounds-scale)"),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="reuse runs already in <out>/reproduction.json (same scales)")
    ] = True,
    report_only: Annotated[
        bool, typer.Option(help="only regenerate the report and plots from the JSON")
    ] = False,
    fairness: Annotated[
        bool,
        typer.Option(
            help="instead of Table 1: venn with epsilon 0, 0.5, 1, 2, 4 (paper Fig 14) on "
            "--workloads (default even, low); <out>/fairness.json and fairness.png"
        ),
    ] = False,
    bound: Annotated[
        bool,
        typer.Option(
            help="instead of Table 1: the LP lower bound on the average JCT of any policy, "
            "per workload (default all five); <out>/bound.json"
        ),
    ] = False,
    bound_slot_s: Annotated[
        float,
        typer.Option(
            help="with --bound: the LP's time slot in seconds (coarser: a smaller LP and a "
            "weaker, still valid, bound; full scale needs coarser than the 1 h default)"
        ),
    ] = 3600.0,
) -> None:
    """All policies over the Table 1 workloads: speed-ups vs the paper, report and plots.

    With --fairness or --bound, only those are run (Table 1 runs of the same scales in
    <out>/reproduction.json are reused), and the report is regenerated with them."""
    from venn.sim.reproduce import TABLE1_WORKLOADS, report_from_json, run_reproduction

    if report_only:
        report_from_json(out)
        return
    if rounds_scale <= 0 or (arrival_scale is not None and arrival_scale <= 0):
        raise typer.BadParameter("scales must be positive")
    if bound_slot_s <= 0:
        raise typer.BadParameter("must be positive", param_hint="--bound-slot-s")
    if fairness or bound:
        a_scale = rounds_scale if arrival_scale is None else arrival_scale
        if fairness:
            from venn.sim.fairness_sweep import FAIRNESS_WORKLOADS, run_fairness

            names = workloads or list(FAIRNESS_WORKLOADS)
            run_fairness(out, jobs, rounds_scale, a_scale, processes, console, names)
        if bound:
            from venn.sim.bound_report import run_bounds

            names = workloads or list(TABLE1_WORKLOADS)
            run_bounds(out, names, jobs, rounds_scale, a_scale, console, bound_slot_s)
        if (out / "reproduction.json").is_file():
            report_from_json(out)
        return
    run_reproduction(
        workloads, jobs, processes, out, rounds_scale, console, arrival_scale, resume=resume
    )


def register(app: typer.Typer) -> None:
    """Attach the simulator commands to the CLI."""
    app.command()(sim)
    app.command()(reproduce)
