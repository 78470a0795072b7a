"""Check-in traces (synthetic, FedScale, replay), capacity tiers and device profiles."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from venn.core.capacity import REFERENCE_CUTOFFS, TierModel, capacity_proxy
from venn.data import data_file, find_data_file
from venn.traces.checkins import (
    CheckinBatch,
    CheckinSource,
    FedScaleTrace,
    ReplayedTrace,
    SyntheticTrace,
    concat,
    load_trace,
    synthetic_capacity,
    task_duration,
)
from venn.traces.devices import NUM_PROFILES, load_device_profiles
from venn.workloads import tier_requirements

DAY = 86_400.0
COLUMNS = tuple(CheckinBatch.DTYPES)


def assert_same(a: CheckinBatch, b: CheckinBatch) -> None:
    assert len(a) == len(b)
    for name in COLUMNS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.fixture(scope="module")
def day() -> CheckinBatch:
    return concat(SyntheticTrace(seed=3, horizon_s=DAY).chunks())


def assert_disjoint_per_device(batch: CheckinBatch) -> int:
    order = np.lexsort((batch.time, batch.device_id))
    ids, start, end = batch.device_id[order], batch.time[order], batch.end[order]
    same = ids[1:] == ids[:-1]
    assert (start[1:][same] >= end[:-1][same]).all()
    return int(same.sum())


# -- synthetic trace -----------------------------------------------------------------------


def test_synthetic_is_deterministic_per_seed() -> None:
    a = concat(SyntheticTrace(seed=7).chunks(0, 3 * 3600))
    b = concat(SyntheticTrace(seed=7).chunks(0, 3 * 3600))
    c = concat(SyntheticTrace(seed=8).chunks(0, 3 * 3600))
    assert_same(a, b)
    assert len(a) != len(c) or not np.array_equal(a.time, c.time)


def test_chunk_is_independent_of_earlier_chunks() -> None:
    streamed = list(SyntheticTrace(seed=5).chunks(0, 6 * 3600))
    assert_same(SyntheticTrace(seed=5).chunk(5), streamed[5])
    assert_same(next(SyntheticTrace(seed=5).chunks(5 * 3600, 6 * 3600)), streamed[5])
    # Device ids continue the global check-in numbering across chunks.
    assert streamed[5].device_id[0] == sum(len(b) for b in streamed[:5])


def test_synthetic_is_an_ordered_checkin_source() -> None:
    trace = SyntheticTrace(seed=1, horizon_s=2 * 3600)
    assert isinstance(trace, CheckinSource)
    batches = list(trace.chunks(600.0, 5000.0))
    allc = concat(batches)
    assert allc.time[0] >= 600.0 and allc.time[-1] < 5000.0
    assert (np.diff(allc.time) >= 0).all()
    assert list(trace.chunks(3 * 3600)) == []  # past the horizon


def test_mean_rate_is_three_per_second_over_a_day(day: CheckinBatch) -> None:
    assert len(day) / DAY == pytest.approx(3.0, rel=0.05)
    # Diurnal: the evening peak is busier than the morning trough.
    trace = SyntheticTrace(seed=3)
    assert trace.rate(22 * 3600) == pytest.approx(4.5)
    assert trace.rate(10 * 3600) == pytest.approx(1.5)
    assert float(trace.cumulative_rate(DAY)) == pytest.approx(3.0 * DAY)


def test_windows_positive_and_capped(day: CheckinBatch) -> None:
    length = day.end - day.time
    assert (length > 0).all()
    assert length.max() <= 4 * 3600 + 1e-6
    assert np.median(length) == pytest.approx(600.0, rel=0.05)
    assert ((day.noise >= 0) & (day.noise < 2)).all()
    assert ((day.u >= 0) & (day.u < 1)).all()
    assert ((day.profile >= 0) & (day.profile < NUM_PROFILES)).all()
    np.testing.assert_array_equal(day.profile, day.device_id % NUM_PROFILES)


def test_no_overlapping_windows_per_device() -> None:
    long = concat(SyntheticTrace(seed=2, horizon_s=2 * DAY).chunks())
    assert assert_disjoint_per_device(long) > 100_000
    small = SyntheticTrace(seed=2, num_devices=20_000, window_cap_s=3600, horizon_s=DAY)
    assert assert_disjoint_per_device(concat(small.chunks())) > 200_000


def test_window_cap_must_stay_below_device_recurrence() -> None:
    with pytest.raises(ValueError, match="overlap"):
        SyntheticTrace(seed=0, num_devices=10_000)


def test_capacity_means_are_one(day: CheckinBatch) -> None:
    trace = SyntheticTrace(seed=3)
    comp, comm = synthetic_capacity(np.arange(136_000), 3)
    assert comp.mean() == pytest.approx(1.0, rel=0.05)
    assert comm.mean() == pytest.approx(1.0, rel=0.05)
    assert np.median(comp) == pytest.approx(0.8, rel=0.05)
    assert np.median(comm) < 0.6  # heavy-tailed bandwidth
    assert day.comp.mean() == pytest.approx(1.0, rel=0.05)
    assert day.comm.mean() == pytest.approx(1.0, rel=0.05)
    # Capacity is a function of (seed, id) only, and fixed per device.
    few = synthetic_capacity(np.array([5, 17]), 3)
    np.testing.assert_array_equal(few[0], comp[[5, 17]])
    np.testing.assert_array_equal(trace.chunk(0).comp, comp[trace.chunk(0).device_id])


def test_task_duration_and_proxy() -> None:
    batch = SyntheticTrace(seed=0).chunk(0).slice(0, 4)
    expected = 30.0 * batch.comp + 20.0 / batch.comm
    np.testing.assert_allclose(task_duration(batch), expected)
    np.testing.assert_allclose(task_duration(batch, 10.0, 5.0), 10 * batch.comp + 10 / batch.comm)
    np.testing.assert_allclose(capacity_proxy(np.array([1.0]), np.array([0.5])), [80.0])


def test_batch_slice_concat_and_dtypes() -> None:
    batch = SyntheticTrace(seed=0).chunk(1)
    assert batch.time.dtype == np.float64 and batch.device_id.dtype == np.int64
    assert batch.profile.dtype == np.int32
    half = len(batch) // 2
    assert_same(concat([batch.slice(0, half), batch.slice(half, len(batch))]), batch)
    assert_same(concat([batch.slice(half, len(batch)), batch.slice(0, half)]), batch)
    assert len(concat([])) == 0
    with pytest.raises(ValueError):
        CheckinBatch(**{n: np.zeros(2 if n == "u" else 3) for n in COLUMNS})


# -- replay -------------------------------------------------------------------------------


def test_replay_repeats_the_period_with_offsets() -> None:
    inner = SyntheticTrace(seed=4, horizon_s=DAY)
    replay = ReplayedTrace(inner, period_s=2 * 3600, repeats=3)
    assert replay.horizon_s == 6 * 3600
    once = concat(inner.chunks(0, 2 * 3600))
    allr = concat(replay.chunks())
    assert len(allr) == 3 * len(once)
    assert (np.diff(allr.time) >= 0).all()
    third = concat(replay.chunks(4 * 3600, math.inf))
    np.testing.assert_allclose(third.time, once.time + 4 * 3600)
    np.testing.assert_array_equal(third.device_id, once.device_id)
    assert third.end.max() <= 6 * 3600
    assert_disjoint_per_device(allr)


# -- FedScale formats ----------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


ROWS = [  # (ID, start, end) in CSV order
    (7, 100.0, 400.0),
    (3, 50.0, 90.0),
    (7, 200.0, 300.0),  # inside row 0: dropped
    (7, 350.0, 500.0),  # starts before row 0 ends: dropped
    (7, 400.0, 450.0),  # starts exactly at row 0's end: kept
    (9, 4000.0, 4100.0),
    (3, 60.0, 60.0),  # empty: dropped
]


def csv_text(header: str, index: bool) -> str:
    lines = [header] if header else []
    for i, (dev, s, e) in enumerate(ROWS):
        lines.append((f"{i}," if index else "") + f"{dev},{s},{e}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("header", "index"),
    [(",ID,start,end", True), ("ID,start,end", False), ("", True), ("", False)],
)
def test_fedscale_csv_layouts_and_overlap_dropping(
    tmp_path: Path, header: str, index: bool
) -> None:
    trace = FedScaleTrace.from_files(write(tmp_path / "a.csv", csv_text(header, index)))
    batch = concat(trace.chunks())
    np.testing.assert_array_equal(batch.time, [50.0, 100.0, 400.0, 4000.0])
    np.testing.assert_array_equal(batch.end, [90.0, 400.0, 450.0, 4100.0])
    np.testing.assert_array_equal(batch.device_id, [3, 7, 7, 9])
    np.testing.assert_array_equal(batch.profile, [1, 0, 4, 5])  # CSV row index % 959
    comp, comm = synthetic_capacity(np.array([3, 7, 7, 9]), 0)
    np.testing.assert_array_equal(batch.comp, comp)
    np.testing.assert_array_equal(batch.comm, comm)
    assert len(list(trace.chunks())) == 2  # hour 0 and hour 1


def test_fedscale_greedy_keeps_interval_after_a_dropped_one(tmp_path: Path) -> None:
    text = "ID,start,end\n1,0,100\n1,50,200\n1,150,160\n"
    batch = concat(FedScaleTrace.from_files(write(tmp_path / "g.csv", text)).chunks())
    np.testing.assert_array_equal(batch.time, [0.0, 150.0])


def test_fedscale_capacity_json_and_csv(tmp_path: Path) -> None:
    avail = write(tmp_path / "a.csv", csv_text(",ID,start,end", True))
    cap_json = write(
        tmp_path / "cap.json",
        json.dumps({"7": {"computation": 156.0, "communication": 6868.0}}),
    )
    cap_csv = write(tmp_path / "cap.csv", "id,computation,communication\n7,156.0,6868.0\n")
    fallback = synthetic_capacity(np.array([3, 9]), 11)
    for cap in (cap_json, cap_csv):
        batch = concat(FedScaleTrace.from_files(avail, cap, seed=11).chunks())
        np.testing.assert_allclose(batch.comp[batch.device_id == 7], [2.0, 2.0])
        np.testing.assert_allclose(batch.comm[batch.device_id == 7], [0.5, 0.5])
        np.testing.assert_array_equal(batch.comp[batch.device_id != 7], fallback[0])
        np.testing.assert_array_equal(batch.comm[batch.device_id != 7], fallback[1])


def test_fedscale_chunks_are_range_independent(tmp_path: Path) -> None:
    trace = FedScaleTrace.from_files(write(tmp_path / "a.csv", csv_text("", False)), seed=4)
    whole = concat(trace.chunks())
    part = concat(trace.chunks(99.0, 401.0))
    np.testing.assert_array_equal(part.time, [100.0, 400.0])
    np.testing.assert_array_equal(part.noise, whole.noise[1:3])
    np.testing.assert_array_equal(part.u, whole.u[1:3])


def test_load_trace(tmp_path: Path) -> None:
    synth = load_trace("synthetic", seed=2, horizon_s=3600)
    assert isinstance(synth, SyntheticTrace) and synth.horizon_s == 3600
    avail = write(tmp_path / "a.csv", csv_text(",ID,start,end", True))
    real = load_trace(str(avail), seed=1, horizon_s=1000)
    assert isinstance(real, FedScaleTrace)
    assert concat(real.chunks()).time.max() < 1000
    replay = load_trace(str(avail), horizon_s=3 * 5000, period_s=5000)
    assert isinstance(replay, ReplayedTrace) and replay.repeats == 3
    assert len(concat(replay.chunks())) == 12


# -- capacity tiers ------------------------------------------------------------------------


def test_capacity_tiers_equal_count_and_reference() -> None:
    comp, comm = synthetic_capacity(np.arange(40_000), 0)
    proxy = capacity_proxy(comp, comm)
    for v in (2, 3, 4):
        tiers = TierModel.from_sample(proxy, v)
        assert tiers.num_tiers == v
        counts = np.bincount(tiers.tiers_of(proxy), minlength=v)
        assert counts.min() >= 0.99 * len(proxy) / v
        assert np.median(proxy[tiers.tiers_of(proxy) == 0]) < np.median(proxy)
    ref = TierModel(REFERENCE_CUTOFFS[4])
    assert ref.cutoffs == (57.0, 120.0, 170.0)
    np.testing.assert_array_equal(ref.tiers_of(np.array([10.0, 57.0, 150.0, 999.0])), [0, 1, 2, 3])
    assert [ref.tier_of(x) for x in (10.0, 57.0, 150.0, 999.0)] == [0, 1, 2, 3]


# -- device profiles -----------------------------------------------------------------------


def test_packaged_lookup_by_base_name() -> None:
    eli = data_file("aibenchmark_eligibility_4.json")
    assert find_data_file("trace/aibenchmark_eligibility_4") == eli
    assert find_data_file("config/job_config_random_eli.yml") is not None
    assert find_data_file("trace/fedscale_clients_7000000_3_info.csv") is None


def test_device_profiles_make_eligibility_pure_data() -> None:
    profiles = load_device_profiles()
    tiers = tier_requirements()
    eligibility = json.loads(data_file("aibenchmark_eligibility_4.json").read_text())
    assert len(profiles) == len(profiles.tiers_met) == 959
    assert [list(t) for t in profiles.tiers_met] == [sorted(e) for e in eligibility]
    for attrs, met in zip(profiles.attrs, profiles.tiers_met, strict=True):
        assert set(attrs) == {"cpu_f", "ram", "fp16_mem", "android_os", "speed_ms_per_sample"}
        for tier, requirement in tiers.items():
            assert requirement.admits(attrs) == (tier in met)
    for tier, requirement in tiers.items():
        expected = np.array([tier in met for met in profiles.tiers_met])
        np.testing.assert_array_equal(profiles.admitted(requirement), expected)
    # Deterministic, and the cycling spreads profiles over many real devices.
    assert load_device_profiles.__wrapped__() == profiles
    assert len(set(profiles.names)) > 500
