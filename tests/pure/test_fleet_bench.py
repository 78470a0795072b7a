"""The fleet benchmark's arithmetic (bench/fleet_bench.py): the check-in model, the gateway
count, /proc CPU parsing and the spread of a tick's check-ins."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.fleet_bench import checkin_rate, fit_line, gateways_for, proc_cpu_s, ratio, spread


def test_ten_million_devices_check_in_100k_times_a_second_at_the_peak() -> None:
    assert checkin_rate(10_000_000) == pytest.approx(100_000)
    assert checkin_rate(10_000) == pytest.approx(100)
    assert checkin_rate(1_000, share=0.5, retry_after_s=10) == pytest.approx(50)


def test_gateways_round_up_and_never_zero() -> None:
    assert gateways_for(100_000, 2000) == 50
    assert gateways_for(100_001, 2000) == 51
    assert gateways_for(100, 2000) == 1
    assert gateways_for(0, 2000) == 1
    with pytest.raises(ValueError):
        gateways_for(100, 0)


def test_proc_stat_cpu_survives_a_command_name_with_spaces_and_parens() -> None:
    fields = ["S", *["0"] * 10, "250", "50", *["0"] * 30]
    stat = "4242 (python (x) y) " + " ".join(fields)
    assert proc_cpu_s(stat, 100) == pytest.approx(3.0)


def test_proc_stat_cpu_of_this_process_grows() -> None:
    stat = Path(f"/proc/{os.getpid()}/stat")
    ticks = os.sysconf("SC_CLK_TCK")
    before = proc_cpu_s(stat.read_text(), ticks)
    end = os.times().elapsed + 0.3
    while os.times().elapsed < end:
        pass
    assert proc_cpu_s(stat.read_text(), ticks) > before


@given(st.integers(0, 5000), st.integers(1, 200), st.integers(0, 2**32))
def test_spread_keeps_every_checkin_even_when_many(total: int, cells: int, seed: int) -> None:
    counts = spread(total, cells, random.Random(seed))
    assert len(counts) == cells
    assert sum(counts) == total
    if total >= 4 * cells:
        assert max(counts) - min(counts) <= 1


def test_ratio() -> None:
    assert ratio([0.1, 0.15, 0.12]) == pytest.approx(1.5)
    assert ratio([0.0, 1.0]) == math.inf


def test_fit_line_recovers_a_line_and_a_flat_one() -> None:
    a, b = fit_line([1, 5, 50], [0.1 + 0.002 * g for g in (1, 5, 50)])
    assert (a, b) == (pytest.approx(0.1), pytest.approx(0.002))
    assert fit_line([3, 3], [1.0, 2.0]) == (pytest.approx(1.5), 0.0)
    with pytest.raises(ValueError):
        fit_line([], [])
