"""Write a `Report` as summary.md, summary.json and PNG plots (matplotlib, Agg backend)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venn.audit.models import RoundAudit
from venn.report.figures import Report, Stats

SUMMARY_MD = "summary.md"
SUMMARY_JSON = "summary.json"
PLOTS = {
    "jct.png": "JCT per job",
    "delay_vs_response.png": "scheduling delay against response time, per round",
    "failed_rounds.png": "failed rounds by reason",
    "tiers.png": "per-tier JCT, scheduling delay and response time",
}


def _fmt(x: float | None, spec: str = ",.1f") -> str:
    return "-" if x is None else format(x, spec)


def _cell(text: str) -> str:
    # Ids and reasons may hold '|', which would split a Markdown table cell.
    return text.replace("|", "\\|")


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def report_json(report: Report, source: str) -> dict[str, Any]:
    """The report as one JSON object (the figures, the source database and the plots)."""
    data = dataclasses.asdict(report)
    data["delay"]["response_dominated_share"] = report.delay.response_dominated_share
    return {"database": source, **data, "plots": sorted(PLOTS)}


def _stats_row(name: str, s: Stats) -> str:
    return (
        f"| {name} | {s.count} | {_fmt(s.mean)} | {_fmt(s.median)} | {_fmt(s.p90)} "
        f"| {_fmt(s.max)} |"
    )


def report_markdown(report: Report, source: str) -> str:
    """The summary as Markdown."""
    d = report.delay
    lines = [
        "# Venn audit report",
        "",
        f"Database: `{source}`. Times are seconds on the pipeline's clock "
        "(trace seconds under `venn demo`).",
        "",
        f"- Jobs: {report.jobs_total} ({report.jobs_finished} finished, "
        f"{report.jobs_cancelled} cancelled, {report.jobs_failed} failed, "
        f"{report.jobs_expired} expired, {report.jobs_unfinished} unfinished)",
        f"- Mean JCT of finished jobs: {_fmt(report.jct.mean)} s "
        f"(median {_fmt(report.jct.median)} s, max {_fmt(report.jct.max)} s)",
        f"- Rounds: {report.rounds_total} closed ({report.rounds_succeeded} succeeded, "
        f"{report.rounds_failed} failed)",
        "",
        "## Per job",
        "",
        "| job | tier | status | JCT (s) | rounds done / asked | attempts | failed "
        "| mean sched delay (s) | mean response time (s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for j in report.jobs:
        done = "-" if j.rounds_completed is None else str(j.rounds_completed)
        asked = "-" if j.rounds is None else str(j.rounds)
        lines.append(
            f"| {_cell(j.job_id)} | {j.tier} | {j.status} | {_fmt(j.jct_s)} | {done} / {asked} "
            f"| {j.attempts} | {j.failed_rounds} | {_fmt(j.sched_delay_s)} "
            f"| {_fmt(j.response_time_s)} |"
        )
    lines += [
        "",
        "## Scheduling delay against response time",
        "",
        "Scheduling delay: a round's open until its demand is assigned; response time: "
        "from then until the round closes.",
        "",
        "| per round | rounds | mean (s) | median (s) | p90 (s) | max (s) |",
        "|---|---:|---:|---:|---:|---:|",
        _stats_row("scheduling delay", d.sched_delay),
        _stats_row("response time", d.response_time),
        "",
        f"Response time exceeds scheduling delay in {d.response_dominated} of {d.rounds} "
        f"rounds ({_share(d.response_dominated_share)}).",
        "",
        "## Failed rounds by reason",
        "",
    ]
    if report.failed_by_reason:
        lines += ["| reason | rounds |", "|---|---:|"]
        lines += [f"| {_cell(kind)} | {n} |" for kind, n in report.failed_by_reason.items()]
    else:
        lines.append("No failed rounds.")
    lines += [
        "",
        "## Per tier",
        "",
        "| tier | jobs | finished | mean JCT (s) | attempts | failed | mean sched delay (s) "
        "| mean response time (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in report.tiers:
        lines.append(
            f"| {t.tier} | {t.jobs} | {t.finished} | {_fmt(t.jct.mean)} | {t.attempts} "
            f"| {t.failed_rounds} | {_fmt(t.sched_delay.mean)} | {_fmt(t.response_time.mean)} |"
        )
    lines += ["", "## Plots", ""]
    lines += [f"- [{name}]({name}): {what}" for name, what in PLOTS.items()]
    return "\n".join(lines) + "\n"


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_report(report: Report, rounds: Sequence[RoundAudit], out: Path) -> list[Path]:
    """The four PNG plots of `PLOTS` in `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    tiers = [t.tier for t in report.tiers]
    colour = {t: f"C{i % 10}" for i, t in enumerate(tiers)}

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append(out / name)

    # JCT per job, coloured by tier; jobs without a JCT are named with their status.
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.35 * len(report.jobs) + 1)))
    if report.jobs:
        ys = range(len(report.jobs))
        ax.barh(
            list(ys),
            [j.jct_s or 0.0 for j in report.jobs],
            color=[colour.get(j.tier, "grey") for j in report.jobs],
        )
        ax.set_yticks(list(ys), [j.job_id for j in report.jobs])
        ax.invert_yaxis()
        for y, j in zip(ys, report.jobs, strict=True):
            if j.jct_s is None:
                ax.text(0, y, f" {j.status}", va="center", fontsize=8)
        handles = [plt.Rectangle((0, 0), 1, 1, color=colour[t]) for t in tiers]
        ax.legend(handles, tiers, fontsize=7, loc="lower right")
        ax.set_xlabel("JCT (s)")
    else:
        _empty(ax, "no jobs recorded")
    ax.set_title("Job completion time")
    save(fig, "jct.png")

    # Scheduling delay against response time, one point per round.
    fig, ax = plt.subplots(figsize=(6, 5))
    points = [
        (r.sched_delay_s, r.response_time_s, r.outcome)
        for r in rounds
        if r.sched_delay_s is not None and r.response_time_s is not None
    ]
    if points:
        for outcome, marker in (("succeeded", "o"), ("failed", "x")):
            mine = [(x, y) for x, y, o in points if o == outcome]
            if mine:
                ax.scatter(*zip(*mine, strict=True), marker=marker, label=outcome, alpha=0.7)
        top = max(max(x, y) for x, y, _ in points) or 1.0
        ax.plot([0, top], [0, top], color="grey", linestyle=":", label="equal")
        ax.set_xlabel("scheduling delay (s)")
        ax.set_ylabel("response time (s)")
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no rounds recorded")
    ax.set_title("Scheduling delay vs response time per round")
    save(fig, "delay_vs_response.png")

    # Failed rounds by reason.
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if report.failed_by_reason:
        kinds = list(report.failed_by_reason)
        ax.bar(kinds, [report.failed_by_reason[k] for k in kinds], color="C3")
        ax.set_ylabel("failed rounds")
    else:
        _empty(ax, "no failed rounds")
    ax.set_title("Failed rounds by reason")
    save(fig, "failed_rounds.png")

    # Per tier: mean JCT, and mean scheduling delay against mean response time.
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    if report.tiers:
        xs = list(range(len(tiers)))
        left.bar(xs, [t.jct.mean or 0.0 for t in report.tiers], color=[colour[t] for t in tiers])
        left.set_xticks(xs, tiers, rotation=20, ha="right", fontsize=8)
        left.set_ylabel("mean JCT of finished jobs (s)")
        width = 0.4
        right.bar(
            [x - width / 2 for x in xs],
            [t.sched_delay.mean or 0.0 for t in report.tiers],
            width,
            label="scheduling delay",
        )
        right.bar(
            [x + width / 2 for x in xs],
            [t.response_time.mean or 0.0 for t in report.tiers],
            width,
            label="response time",
        )
        right.set_xticks(xs, tiers, rotation=20, ha="right", fontsize=8)
        right.set_ylabel("mean per round (s)")
        right.legend(fontsize=8)
    else:
        _empty(left, "no jobs recorded")
        _empty(right, "no rounds recorded")
    left.set_title("JCT per tier")
    right.set_title("Round times per tier")
    save(fig, "tiers.png")
    return written


def write_report(
    report: Report, rounds: Sequence[RoundAudit], out: Path, source: str
) -> list[Path]:
    """summary.md, summary.json and the plots in `out` (created); returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / SUMMARY_MD, out / SUMMARY_JSON
    md.write_text(report_markdown(report, source))
    js.write_text(json.dumps(report_json(report, source), indent=2) + "\n")
    return [md, js, *plot_report(report, rounds, out)]
