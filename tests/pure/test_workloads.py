"""Workload loading: the five packaged workloads, sampling rules and file resolution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from venn.data import DATA_DIR
from venn.workloads import (
    FIRST_ARRIVAL_S,
    WORKLOAD_NAMES,
    load_workload,
    tier_names,
    tier_requirements,
)

TIERS = tier_requirements()


def packaged(name: str) -> dict:
    return yaml.safe_load((DATA_DIR / "workloads" / f"{name}_workload.yml").read_text())


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_packaged_workloads(name: str) -> None:
    workload = load_workload(name)
    raw = packaged(name)
    assert workload.name == name and workload.seed == raw["RANDOMSEED"]
    assert (workload.num_days, workload.num_weeks) == (raw["NUM_DAY"], raw["NUM_WEEK"])
    assert workload.horizon_s == raw["NUM_DAY"] * raw["NUM_WEEK"] * 86400
    assert workload.client_file is None
    assert len(workload.templates) == 33 and len(workload.jobs) == 50
    allowed = {i for i, p in enumerate(raw["job_id_prob"]) if p > 0}
    arrivals = np.array([job.arrival for job in workload.jobs])
    assert arrivals[0] == FIRST_ARRIVAL_S and (np.diff(arrivals) > 0).all()
    for i, job in enumerate(workload.jobs):
        assert job.job_id == f"job-{i:03d}"
        assert job.tier == i % 4 + 1 and job.requirement == TIERS[job.tier]
        assert job.template in allowed
        template = workload.templates[job.template]
        assert (job.demand, job.rounds, job.deadline, job.workload_s) == (
            template.participants,
            template.rounds,
            template.deadline,
            template.workload_s,
        )


def test_sampling_is_deterministic_and_seedable() -> None:
    assert load_workload("even") == load_workload("even")
    other = load_workload("even", seed=11)
    assert other.seed == 11 and other.jobs != load_workload("even").jobs
    assert len(load_workload("low", jobs=7).jobs) == 7
    mean_gap = np.diff([j.arrival for j in load_workload("even", jobs=2000, seed=1).jobs]).mean()
    assert mean_gap == pytest.approx(1800, rel=0.1)


def test_tier_requirements_and_names() -> None:
    assert tier_names == {1: "general", 2: "compute-rich", 3: "memory-rich", 4: "high-performance"}
    assert dict(TIERS[4].thresholds) == {"fp16_mem": 1000.0, "cpu_f": 7.0, "android_os": 6.0}
    assert dict(TIERS[1].thresholds) == {"fp16_mem": 10.0, "cpu_f": 1.0, "android_os": 6.0}


TEMPLATES = """
jobs:
  - config: {participants: 10, rounds: 5, deadline: 300, workload: 30, job_type: sync}
  - config: {participants: 20, rounds: 6, deadline: 600, workload: 15, job_type: sync}
job_requirement:
  - eligibility: {memory: 1, cpu: 1, os: 1}
  - eligibility: {memory: 2, cpu: 2, os: 2}
"""


def write_workload(directory: Path, **extra: object) -> Path:
    spec = {
        "RANDOMSEED": 3,
        "NUM_DAY": 2,
        "NUM_WEEK": 3,
        "client_file": "trace/clients.csv",
        "eligibility_file": "trace/aibenchmark_eligibility_4",
        "job_config_file": "config/mine.yml",
        "job_id_prob": [0, 1],
        "job_type_prob": [1, 0, 0],
    } | extra
    path = directory / "custom.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_files_resolve_by_base_name_beside_the_yaml(tmp_path: Path) -> None:
    (tmp_path / "mine.yml").write_text(TEMPLATES)
    (tmp_path / "clients.csv").write_text("ID,start,end\n1,0,10\n")
    workload = load_workload(str(write_workload(tmp_path)), jobs=6)
    assert workload.name == "custom" and workload.horizon_s == 6 * 86400
    assert workload.client_file == tmp_path / "clients.csv"
    assert len(workload.templates) == 2
    assert {job.template for job in workload.jobs} == {1}
    assert [job.tier for job in workload.jobs] == [1, 2, 1, 2, 1, 2]
    assert workload.jobs[1].requirement.as_dict() == {
        "android_os": 2.0,
        "cpu_f": 2.0,
        "fp16_mem": 2.0,
    }
    assert workload.jobs[0].workload_s == 15.0


def test_files_fall_back_to_packaged_data(tmp_path: Path) -> None:
    probs = [0] * 32 + [1]
    path = write_workload(
        tmp_path, job_config_file="config/job_config_random_eli", job_id_prob=probs
    )
    workload = load_workload(str(path), jobs=8)
    assert workload.client_file is None
    assert len(workload.templates) == 33
    assert {job.template for job in workload.jobs} == {32}
    assert [job.tier for job in workload.jobs] == [1, 2, 3, 4, 1, 2, 3, 4]


@pytest.mark.parametrize("key", ["eligiblility_prob", "eligibility_prob"])
def test_tier_probabilities_override_round_robin(tmp_path: Path, key: str) -> None:
    path = write_workload(
        tmp_path,
        job_config_file="job_config_random_eli.yml",
        job_id_prob=[1] * 33,
        **{key: [0, 0, 1, 0]},
    )
    jobs = load_workload(str(path), jobs=12).jobs
    assert {job.tier for job in jobs} == {3}
    assert all(job.requirement == TIERS[3] for job in jobs)


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_workload("nope")
    path = write_workload(tmp_path, job_config_file="job_config_random_eli.yml")
    with pytest.raises(ValueError, match="job_id_prob"):
        load_workload(str(path))
    with pytest.raises(FileNotFoundError):
        load_workload(str(write_workload(tmp_path, job_config_file="config/missing.yml")))
