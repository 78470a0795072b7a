"""Venn schedules Flower: real flwr 1.42 processes on loopback beside the session's Kafka, a
scheduler worker, a gateway and the Venn Flower bridge, in both of Flower's modes at once:

- insecure: four SuperNodes started by venn-flower's launcher, two runs with overlapping
  requirements training at once;
- secure: TLS to a second SuperLink and node authentication (keys registered under the
  nodes' names), one node enrolled by its launcher, one checking in under a fixed device
  token as its plain name (found through the SuperLink's node names), one run.

Stated accuracy: every run's model reaches at least 80% on its held-out test set (a
logistic regression on a linear task, an MLP on a nonlinear three-class task; the initial
models score 49% and 41%).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from venn_flower.profile import device_name

from devtools.flower_testbed.cluster import EXAMPLE_APPS, FlowerTestbed, NodeSpec
from devtools.flower_testbed.node import parse_requirement
from devtools.flower_testbed.report import RunReport, overlaps, unassigned_work
from devtools.process import tail
from tests.event_recorder import EventRecorder
from venn.auth import Tokens
from venn.broker import topics
from venn.events import Assignment, RoundClosed

# Flower's own process launches dominate the setup (191 s in the CI of 7e3d220); under load
# 12-22 a ServerApp started later than the 30 s flwr allows after its run was claimed and was
# launched again until one made it: the plain bed's runs first reached Venn 274 s after its
# bridge started (clean-clone run of 0e04fdc). Quiet here 142 s, beside two busy loops 165 s;
# the CI of d19a321 passed 600 s and said nothing of why: the runs' own budget now ends
# before pytest's timeout, with every log of the beds and the scheduler in its failure.
TIMEOUT_S = 900
BUDGET_S = TIMEOUT_S - 180
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TIMEOUT_S)]

ACCURACY = 0.8
NODES = [
    NodeSpec("d1", {"cpu_f": 2, "ram": 2}, speed_ms=2.0, seed=1),
    NodeSpec("d2", {"cpu_f": 4, "ram": 4}, speed_ms=2.0, seed=2),
    NodeSpec("d3", {"cpu_f": 6, "ram": 8}, speed_ms=1.0, seed=3),
    NodeSpec("d4", {"cpu_f": 8, "ram": 16}, speed_ms=1.0, seed=4),
]
RUNS = {
    # (app, requirement, rounds): every node may serve "a"; only d3 and d4 may serve "b".
    "a": ("logreg", "cpu_f=2", 2),
    "b": ("mlp", "ram=8", 2),
}
# One Venn serves both SuperLinks: each federation's runs require an attribute only its own
# nodes have (the insecure runs need cpu_f >= 2, which s1 and s2 lack; "c" needs secure).
SECURE_NODES = [
    NodeSpec("s1", {"cpu_f": 1, "ram": 1, "secure": 1}, speed_ms=1.0, seed=11),
    NodeSpec("s2", {"cpu_f": 1, "ram": 1, "secure": 1}, speed_ms=1.0, seed=12),
]
SECURE_RUNS = {"c": ("logreg", "secure=1", 2)}
ALL_RUNS = {**RUNS, **SECURE_RUNS}
ALL_NODES = {n.device_id: n for n in [*NODES, *SECURE_NODES]}
COMMON = {"demand": 2, "samples": 100, "wait-s": 60.0}


@dataclass
class Outcome:
    reports: dict[str, RunReport]
    job_ids: dict[str, str]
    assignments: list[Assignment]
    closes: list[RoundClosed]
    wall_s: float
    run_logs: dict[str, str]
    """Each run's `flwr log`."""


@pytest.fixture(scope="module")
async def outcome(
    flower_venn: tuple[str, str], broker: str, tmp_path_factory: pytest.TempPathFactory
) -> Outcome:
    budget_end = time.monotonic() + BUDGET_S
    basetemp = tmp_path_factory.getbasetemp()
    gateway, secret = flower_venn
    tokens = Tokens(secret)
    tok = uuid.uuid4().hex[:6]
    job_ids = {name: f"flwr-e2e-{tok}-{name}" for name in (*RUNS, *SECURE_RUNS)}
    # Each bridge's SDK: the session's broker, and one job token for every run.
    bridge_env = {
        "VENN_BROKER": broker,
        "VENN_JOB_TOKEN": tokens.issue("job", "test", jobs=[f"flwr-e2e-{tok}-*"], ttl_s=3600),
    }
    enroll = tokens.issue("enroll", "test", ttl_s=3600)
    insecure = FlowerTestbed(
        Path(tmp_path_factory.mktemp("flower")),
        NODES,
        gateway=gateway,
        enroll_token=enroll,
        bridge_env=bridge_env,
    )
    secure = FlowerTestbed(
        Path(tmp_path_factory.mktemp("flower-secure")),
        SECURE_NODES,
        gateway=gateway,
        enroll_token=enroll,
        # s2 checks in under its plain name with a device token of its own.
        device_tokens={"s2": tokens.issue("device", "s2", ttl_s=3600)},
        bridge_env=bridge_env,
        secure=True,
    )
    recorder = await EventRecorder(broker, [topics.ASSIGNMENTS, topics.ROUNDS]).start()

    def closes(job_id: str) -> int:
        return sum(
            1
            for e in recorder.events(topics.ROUNDS)
            if isinstance(e, RoundClosed) and e.job_id == job_id and e.outcome == "succeeded"
        )

    def train(bed: FlowerTestbed, runs: dict[str, tuple[str, str, int]]) -> list[RunReport]:
        with bed, ThreadPoolExecutor(len(runs)) as pool:
            # `flwr run` takes seconds (it builds and uploads the app): all runs at once.
            submitted = list(
                pool.map(
                    lambda item: bed.submit(
                        EXAMPLE_APPS / item[1][0],
                        item[0],
                        {
                            **COMMON,
                            "requirement": item[1][1],
                            "num-rounds": item[1][2],
                            "venn-job-id": job_ids[item[0]],
                        },
                    ),
                    runs.items(),
                )
            )
            return bed.wait(submitted, timeout=max(60.0, budget_end - time.monotonic()))

    started = time.monotonic()
    try:
        try:
            reports = await asyncio.gather(
                asyncio.to_thread(train, insecure, RUNS),
                asyncio.to_thread(train, secure, SECURE_RUNS),
            )
        except Exception as exc:
            scheduler = [tail(p, 60) for p in basetemp.glob("flower-venn*/scheduler.log")]
            raise RuntimeError(
                f"{exc}\n=== insecure bed\n{insecure.digest()}\n=== secure bed\n"
                f"{secure.digest()}\n=== scheduler\n{''.join(scheduler)}"
            ) from exc
        jobs = set(job_ids.values())
        rounds = sum(r[2] for r in ALL_RUNS.values())
        await recorder.wait_for(lambda: sum(closes(j) for j in jobs) >= rounds)
    finally:
        await recorder.stop()
    closed = [
        e for e in recorder.events(topics.ROUNDS) if isinstance(e, RoundClosed) and e.job_id in jobs
    ]
    return Outcome(
        {r.name: r for r in [*reports[0], *reports[1]]},
        job_ids,
        recorder.assignments(jobs),
        closed,
        time.monotonic() - started,
        {
            name: (bed.root / f"run-{name}.log").read_text()
            for bed, runs in ((insecure, RUNS), (secure, SECURE_RUNS))
            for name in runs
        },
    )


async def test_every_run_finishes_and_reaches_the_stated_accuracy(outcome: Outcome) -> None:
    assert set(outcome.reports) == set(ALL_RUNS)
    for name, report in outcome.reports.items():
        assert report.scheduler == "venn"
        rounds = ALL_RUNS[name][2]
        assert len(report.accuracy) == rounds + 1, name
        assert report.final_accuracy >= ACCURACY, (name, report.accuracy)
        succeeded = [c for c in outcome.closes if c.job_id == report.job_id]
        assert sum(c.outcome == "succeeded" for c in succeeded) >= rounds, name
        assert all(r.source == "venn" for r in report.venn_rounds), name
    # The runs that share nodes trained at the same time ("c" has the secure bed's nodes to
    # itself; on a loaded machine that bed started 108 s earlier: CI of daa94cc).
    a, b = (outcome.reports[n] for n in ("a", "b"))
    assert min(a.finished, b.finished) > max(a.started, b.started)


async def test_every_node_a_round_used_was_assigned_to_that_run_by_venn(outcome: Outcome) -> None:
    # A launched node's Venn device is "<name>@<its Flower node id>", s2's its plain name.
    assigned = {(a.job_id, a.round_index, device_name(a.device_id)) for a in outcome.assignments}
    for name, report in outcome.reports.items():
        assert report.tasks, name
        assert report.failed_replies == 0, name
        # Per the run's own record of its Venn rounds...
        assert unassigned_work(report) == [], name
        # ...and per what the scheduler published on venn.assignments.
        attempts = {
            r.server_round: {r.round_index, *r.replacements}
            for r in report.venn_rounds
            if r.replied
        }
        requirement = parse_requirement(ALL_RUNS[name][1])
        for task in report.tasks:
            keys = {(report.job_id, i, task.device) for i in attempts[task.server_round]}
            assert keys & assigned, (name, task)
            attrs = ALL_NODES[task.device].attrs
            assert requirement.admits({k: float(v) for k, v in attrs.items()}), task
    # Run "b" may use only d3 and d4; the scheduler really chose between the runs there.
    assert {t.device for t in outcome.reports["b"].tasks} <= {"d3", "d4"}


async def test_no_node_served_two_runs_at_once(outcome: Outcome) -> None:
    reports = list(outcome.reports.values())
    assert sum(len(r.tasks) for r in reports) >= sum(r[2] for r in ALL_RUNS.values())
    assert overlaps(reports) == []


async def test_secure_mode_maps_devices_by_node_id_and_by_registered_name(outcome: Outcome) -> None:
    c = outcome.job_ids["c"]
    devices = {a.device_id for a in outcome.assignments if a.job_id == c}
    assert "s2" in devices  # a fixed device token: the plain name, found among node names
    assert any(d.startswith("s1@") for d in devices)  # enrolled by its launcher
    assert {t.device for t in outcome.reports["c"].tasks} == {"s1", "s2"}


async def test_venns_decisions_are_in_each_runs_flwr_log(outcome: Outcome) -> None:
    for name, text in outcome.run_logs.items():
        assert "[venn] Venn job " in text, name
        assert re.search(r"\[venn\] round 1 train: [12] node\(s\) from Venn in", text), name
        assert "[venn] round 1 train succeeded:" in text, name
