"""``venn reproduce --fairness --bound`` on a tiny workload: the sweep, the bound, and
the report sections they add."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from venn.sim.bound_report import report_section
from venn.sim.reproduce import ANALYSIS_BEGIN, ANALYSIS_END, POLICY_ORDER, run_reproduction


def test_bound_section_divides_each_policy_by_the_bound() -> None:
    bounds = {"low": {"lp_mean_s": 100.0, "alone_mean_s": 40.0}}
    results: dict[str, dict[str, dict[str, Any]]] = {
        "low": {
            "isolated": {"jct_by_job": {"a": 50.0, "b": 70.0, "c": None}},
            "fifo": {"avg_jct_censored_s": 250.0},
            "venn": {"avg_jct_censored_s": 180.0},
        }
    }
    lines = report_section(
        bounds, results, ["fifo", "srsf", "venn"], {"jobs": 3, "rounds_scale": 1}
    )
    assert "| low | 100 | 40 | 60 | 2.50 | - | 1.80 |" in lines


def test_reproduce_fairness_and_bound_add_their_sections(tmp_path: Path) -> None:
    run_reproduction(["low"], 2, 1, tmp_path, 0.003, Console(quiet=True))
    report = tmp_path / "reproduction.md"
    report.write_text(report.read_text().replace("(No analysis written yet.)", "Kept."))
    cmd = [sys.executable, "-m", "venn.cli", "reproduce", "--workloads", "low", "--jobs", "2"]
    cmd += ["--rounds-scale", "0.003", "--processes", "1", "--out", str(tmp_path)]
    subprocess.run([*cmd, "--fairness", "--bound"], capture_output=True, text=True, check=True)

    sweep = json.loads((tmp_path / "fairness.json").read_text())
    assert sweep["meta"] == {"jobs": 2, "rounds_scale": 0.003, "arrival_scale": 0.003}
    low = sweep["runs"]["low"]
    assert set(low) == {
        "isolated",
        "random",
        "random-order",
        *(f"eps={e:g}" for e in (0, 0.5, 1, 2, 4)),
    }
    table1 = json.loads((tmp_path / "reproduction.json").read_text())["results"]["low"]
    assert low["eps=0"] == table1["venn"]  # epsilon 0 is the report's venn run
    assert (tmp_path / "fairness.png").stat().st_size > 1000

    bound = json.loads((tmp_path / "bound.json").read_text())["bounds"]["low"]
    assert 0 < bound["alone_mean_s"] <= bound["lp_mean_s"]
    for p in POLICY_ORDER:  # no policy beats the bound
        assert table1[p]["avg_jct_censored_s"] >= bound["lp_mean_s"] - 1e-6, p

    text = report.read_text()
    assert text.index("## Fairness (paper Fig 14)") < text.index("## Optimality bound")
    assert text.index("## Optimality bound") < text.index("## Plots")
    assert "| low | 4 |" in text
    assert f"{ANALYSIS_BEGIN}\nKept.\n{ANALYSIS_END}" in text
