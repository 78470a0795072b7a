"""CPU time from /proc (devtools/procs.py), as the benchmarks and the load test read it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devtools.procs import descendants, parent_of, proc_cpu, proc_cpu_s, process_cpu


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
    stat = Path(f"/proc/{os.getpid()}/stat")
    before = (process_cpu([os.getpid()]), proc_cpu(os.getpid()))
    sum(i * i for i in range(2_000_000))
    assert process_cpu([os.getpid()]) > before[0]
    assert proc_cpu(os.getpid()) > before[1]
    assert proc_cpu_s(stat.read_text(), os.sysconf("SC_CLK_TCK")) == pytest.approx(
        proc_cpu(os.getpid()), abs=0.05
    )


def test_a_process_that_is_gone_used_nothing() -> None:
    assert proc_cpu(None) == 0.0
    assert proc_cpu(2**22 + 12345) == 0.0  # above pid_max: never a process
