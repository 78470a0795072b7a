"""`make bench` (bench/run_all.py) knows every benchmark: it runs the quick ones without
publishing and lists the long ones with their commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.run_all import BENCHES, command, listing

ROOT = Path(__file__).resolve().parents[2]


def test_every_bench_script_is_catalogued() -> None:
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")} - {"run_all.py", "__init__.py"}
    assert {b.script for b in BENCHES} == scripts
    assert "run_all.py" in (ROOT / "Makefile").read_text()


def test_the_quick_runs_publish_nothing_unless_asked() -> None:
    for b in BENCHES:
        if b.quick_args is None or b.script == "reproduction_stats.py":  # it only reads
            continue
        assert "--no-write" in command(b), b.script
        assert "--no-write" not in command(b, write=True), b.script


def test_the_listing_names_every_long_bench() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_all.py"), "--list"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    assert listing() in out
    for b in BENCHES:
        assert f"bench/{b.script}" in out
