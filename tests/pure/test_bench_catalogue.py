"""`make bench` (`python -m bench.run_all`) knows every benchmark: it runs the quick ones
without publishing and lists the long ones with their commands. (Read from its output: no
test imports a benchmark.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = {"__init__", "common", "gateway_load", "run_all"}
"""The modules of bench/ that are no benchmark."""


def listed(*flags: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.run_all", "--list", *flags],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    return out.splitlines()


def test_every_benchmark_is_listed_with_its_command() -> None:
    benches = {p.stem for p in (ROOT / "bench").glob("*.py")} - SHARED
    lines = listed()
    for name in benches:
        assert any(f"python -m bench.{name}" in line for line in lines), name
    assert "bench.run_all" in (ROOT / "Makefile").read_text()


def test_the_quick_runs_publish_nothing_unless_asked() -> None:
    quick = [line for line in listed() if line.startswith("quick:")]
    written = [line for line in listed("--write") if line.startswith("quick:")]
    assert quick and len(quick) == len(written)
    for line, with_write in zip(quick, written, strict=True):
        if "reproduction_stats" in line:  # it only reads
            continue
        assert "--no-write" in line and "--no-write" not in with_write, line
