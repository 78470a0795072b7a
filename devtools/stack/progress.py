"""Rich renderings of a running demo and of its result."""

from __future__ import annotations

import time

from rich.console import Group
from rich.table import Table
from rich.text import Text

from devtools.stack.demo import DemoHandles, DemoResult


class ProgressView:
    """Live view: per job, round k of n and its current round; fleet rates."""

    def __init__(self, handles: DemoHandles) -> None:
        self.handles = handles
        self._last: tuple[float, int] | None = None
        self._rate = 0.0

    def _assignment_rate(self) -> float:
        fleet = self.handles.fleet
        if fleet is None:
            return 0.0
        now = time.monotonic()
        if self._last is not None and now - self._last[0] >= 1.0:
            self._rate = (fleet.assignments - self._last[1]) / (now - self._last[0])
            self._last = (now, fleet.assignments)
        elif self._last is None:
            self._last = (now, fleet.assignments)
        return self._rate

    def __rich__(self) -> Group:
        h = self.handles
        table = Table(title="jobs", expand=False)
        for col in ("job", "state", "round", "attempt", "assigned", "results", "JCT (trace s)"):
            table.add_column(col, justify="right" if col != "job" else "left")
        for p in sorted(h.progress.values(), key=lambda p: p.job_id):
            table.add_row(
                p.job_id,
                p.state,
                f"{min(p.rounds_done + 1, p.rounds)} of {p.rounds}"
                if p.state == "running"
                else f"{p.rounds_done} of {p.rounds}",
                str(p.attempt),
                f"{p.assigned}/{p.demand}",
                str(p.results),
                f"{p.jct_s:.0f}" if p.jct_s is not None else "",
            )
        fleet = h.fleet
        trace = h.clock.now() if h.clock is not None else 0.0
        line = Text(f"{h.phase}  trace time {trace:,.0f} s")
        if fleet is not None:
            line.append(
                f"  check-ins {fleet.checkins}  assignments {fleet.assignments}"
                f" ({self._assignment_rate():.1f}/s)  results ok {fleet.results_ok}"
                f" failed {fleet.results_failed}"
            )
        return Group(line, table)


def result_table(result: DemoResult) -> Table:
    """Per-job JCT and the average, as printed at the end of `venn demo`."""
    table = Table(
        title=f"policy {result.policy}: JCT in trace seconds (speed-up {result.speedup:g})"
    )
    for col in ("job", "tier", "D", "rounds", "arrival", "attempts", "JCT"):
        table.add_column(col, justify="left" if col == "job" else "right")
    for job in result.jobs:
        jct = result.jct_s.get(job.job_id)
        table.add_row(
            job.job_id,
            str(job.tier),
            str(job.demand),
            str(job.rounds),
            f"{job.arrival:.0f}",
            str(result.attempts.get(job.job_id, 0)),
            f"{jct:.0f}" if jct is not None else "unfinished",
        )
    avg = result.avg_jct_s
    table.add_section()
    table.add_row("average", "", "", "", "", "", f"{avg:.0f}" if avg is not None else "-")
    return table
