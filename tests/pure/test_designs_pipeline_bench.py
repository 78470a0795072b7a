"""The pipeline designs benchmark's arithmetic (bench/designs_pipeline_bench.py): the setups,
process trees from /proc, the window's answers, per check-in figures, message deltas."""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import pytest

from bench.designs_pipeline_bench import (
    B_QUOTA,
    delta_messages,
    descendants,
    markdown,
    metric_total,
    parent_of,
    per_checkin,
    proc_cpu_s,
    process_cpu,
    setups,
    stack_line,
    window_answers,
)


def test_the_setups_differ_only_where_the_designs_do() -> None:
    plan = {s.name: s for s in setups([2, 1], before=True)}
    assert list(plan) == ["A", "B", "C2", "C1", "before"]
    assert plan["A"].gateway_env == {} and plan["A"].tree == "main"
    assert plan["B"].gateway_env == {"VENN_GATEWAY_FORWARD_QUOTA": B_QUOTA}
    assert float(B_QUOTA) >= 1e6  # no remaining demand times it is ever reached
    assert plan["before"].gateway_env == {"VENN_GATEWAY_FAST_NO": "0"}
    for n in (1, 2):
        c = plan[f"C{n}"]
        assert (c.tree, c.mode, c.workers) == ("c", "leased", n)
    assert [s.name for s in setups([], before=False)] == ["A", "B"]


def test_parent_pid_and_cpu_survive_a_command_name_with_spaces_and_parens() -> None:
    fields = ["S", "77", *["0"] * 9, "250", "50", *["0"] * 30]
    stat = "4242 (python (x) y) " + " ".join(fields)
    assert parent_of(stat) == 77
    assert proc_cpu_s(stat, 100) == pytest.approx(3.0)


def test_descendants_follow_the_whole_tree_and_nothing_else() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
    assert descendants(10, parents) == {10, 11, 12, 13}
    assert descendants(13, parents) == {13}
    assert descendants(99, parents) == {99}


def test_this_process_cpu_is_read_and_grows() -> None:
    before = process_cpu([os.getpid()])
    sum(i * i for i in range(2_000_000))
    assert process_cpu([os.getpid()]) > before


def test_the_window_counts_answers_by_their_time_half_open() -> None:
    answers = [
        (0.9, "assigned", 0.01),
        (1.0, "assigned", 0.02),
        (1.5, "no_open_round", 0.001),
        (1.9, "no_assignment", 2.0),
        (2.0, "assigned", 0.03),
    ]
    got = window_answers(answers, 1.0, 2.0)
    assert got["answered"] == 3
    assert got["assigned"] == 1
    assert got["reasons"] == {"assigned": 1, "no_open_round": 1, "no_assignment": 1}
    assert got["p99_ms"] == pytest.approx(2000.0)
    assert got["p50_ms"] == pytest.approx(20.0)
    assert math.isnan(window_answers(answers, 5.0, 6.0)["p99_ms"])


def test_per_checkin_divides_by_the_check_ins_answered() -> None:
    row = {
        "window_s": 20.0,
        "cpu_s": {"scheduler": 0.5, "gateway": 4.0, "broker": 2.0},
        "messages": {"venn": 400, "all": 1000},
        "answers": {"answered": 20_000, "assigned": 800},
        "scheduler_read": 2_000,
    }
    got = per_checkin(row)
    assert got["scheduler_us"] == pytest.approx(25.0)
    assert got["gateway_us"] == pytest.approx(200.0)
    assert got["broker_us"] == pytest.approx(100.0)
    assert got["scheduler_reads"] == pytest.approx(0.1)
    assert got["venn_messages"] == pytest.approx(0.02)
    assert got["all_messages"] == pytest.approx(0.05)
    assert got["checkins_per_s"] == pytest.approx(1000.0)
    assert got["assigned_per_s"] == pytest.approx(40.0)


def test_messages_are_end_offset_deltas_with_venn_topics_apart() -> None:
    before = {"venn.checkins": 100, "venn.status": 5, "app-round-changelog": 7}
    after = {"venn.checkins": 160, "venn.status": 5, "app-round-changelog": 17, "venn.leases": 3}
    got = delta_messages(before, after)
    assert got["venn"] == 63
    assert got["all"] == 73
    assert got["by_topic"] == {"app-round-changelog": 10, "venn.checkins": 60, "venn.leases": 3}


def test_the_stack_line_skips_what_else_the_child_prints() -> None:
    out = io.StringIO('starting\n{"x": 1}\n{"url": "http://h:1", "gateway_pid": 5}\nlater\n')
    assert stack_line(out) == {"url": "http://h:1", "gateway_pid": 5}
    assert stack_line(io.StringIO("nothing\n")) is None


def test_the_page_has_a_row_per_setup_with_its_figures() -> None:
    rows = []
    for s in setups([2], before=False):
        row = {
            "setup": {"name": s.name, "label": s.label},
            "window_s": 10.0,
            "cpu_s": {"scheduler": 0.1, "gateway": 1.0, "broker": 0.5},
            "idle_cores": {"scheduler": 0.01, "gateway": 0.02, "broker": 0.1},
            "messages": {"venn": 50, "all": 80, "by_topic": {"venn.checkins": 50}},
            "scheduler_read": 1_000,
            "answers": {"answered": 10_000, "assigned": 300, "reasons": {"assigned": 300},
                        "p99_ms": 12.0},
        }  # fmt: skip
        row["per_checkin"] = per_checkin(row)
        rows.append(row)
    meta = {"date": "d", "cores": 2, "command": "c", "seconds": 1.0, "commit": "abc",
            "demand": 50, "deadline_s": 5.0, "rate": 1000.0, "fleet": 100_000,
            "window_s": 10.0, "warmup_s": 5.0}  # fmt: skip
    text = markdown(meta, rows)
    for name in ("A", "B", "C2"):
        assert f"| {name}: " in text
    assert "| 0.100 | **10.0** | **100.0** | 50.0 | **0.005**" in text


def test_the_bench_module_imports_nothing_of_the_project_at_its_top() -> None:
    """Its `stack` subcommand runs with another tree on PYTHONPATH."""
    source = Path(__file__).resolve().parents[2] / "bench" / "designs_pipeline_bench.py"
    top = [
        line for line in source.read_text().splitlines()
        if line.startswith(("import ", "from ")) and not line.startswith("from __future__")
    ]  # fmt: skip
    assert top and not any(("venn" in line or "services" in line) for line in top)


def test_a_metric_is_summed_over_its_labels_and_no_other_metric() -> None:
    page = (
        "# HELP venn_scheduler_checkins_total x\n"
        "venn_scheduler_checkins_total 120.0\n"
        'venn_scheduler_checkins_total{worker="2"} 30.0\n'
        "venn_scheduler_checkins_created 1.7e9\n"
        "venn_scheduler_checkins_total_other 5.0\n"
    )
    assert metric_total(page, "venn_scheduler_checkins_total") == pytest.approx(150.0)
    assert metric_total(page, "absent") == 0.0
