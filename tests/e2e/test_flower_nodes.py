"""A SuperNode that leaves mid-round and comes back: real flwr processes, Venn's scheduler
and gateway on the session's Kafka, the Venn Flower bridge.

d3 is stopped (SIGTERM: its launcher, SuperNode and ClientApp) while it works on run b's
task, and started again: a new SuperNode, hence a new Flower node id and a new Venn device
(``d3@<new id>``). b's round must not wait for the old node: it asks Venn for a replacement
in the same round and gets the restarted d3 (b needs ram >= 8: d3 and d4 only).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from venn_flower.profile import device_name

from devtools.flower_testbed.cluster import EXAMPLE_APPS, FlowerTestbed, NodeSpec
from devtools.flower_testbed.report import RunReport
from tests.event_recorder import EventRecorder
from venn.auth import Tokens
from venn.broker import topics
from venn.events import Assignment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

# Tasks of 10 s (d3 is stopped in the middle of one); d3 and d4 alike, so Venn's matching of
# device speeds to rounds treats the restarted d3 as it did the old one.
NODES = [
    NodeSpec("d1", {"cpu_f": 2, "ram": 2}, speed_ms=10.0, seed=1),
    NodeSpec("d3", {"cpu_f": 6, "ram": 8}, speed_ms=10.0, seed=3),
    NodeSpec("d4", {"cpu_f": 8, "ram": 16}, speed_ms=10.0, seed=4),
]
ROUNDS = 2
CONFIG = {"demand": 2, "samples": 100, "wait-s": 90.0, "num-rounds": ROUNDS, "requirement": "ram=8"}


@dataclass
class Restart:
    report: RunReport
    assignments: list[Assignment]
    restarted_at: float
    run_log: str


@pytest.fixture(scope="module")
async def restart(
    flower_venn: tuple[str, str], broker: str, tmp_path_factory: pytest.TempPathFactory
) -> Restart:
    gateway, secret = flower_venn
    tokens = Tokens(secret)
    job_id = f"flwr-e2e-{uuid.uuid4().hex[:6]}-b"
    bed = FlowerTestbed(
        Path(tmp_path_factory.mktemp("flower-nodes")),
        NODES,
        gateway=gateway,
        enroll_token=tokens.issue("enroll", "test", ttl_s=3600),
        bridge_env={
            "VENN_BROKER": broker,
            "VENN_JOB_TOKEN": tokens.issue("job", "test", jobs=[job_id], ttl_s=3600),
        },
    )
    recorder = await EventRecorder(broker, [topics.ASSIGNMENTS]).start()

    def train() -> tuple[RunReport, float]:
        with bed:
            run = bed.submit(EXAMPLE_APPS / "mlp", "b", {**CONFIG, "venn-job-id": job_id})
            d3_log = bed.root / "node-d3.log"
            deadline = time.monotonic() + 180
            while f"task of {job_id}" not in d3_log.read_text(errors="replace"):
                assert time.monotonic() < deadline, "d3 never started a task of run b"
                time.sleep(0.1)
            bed.stop_node("d3", signal.SIGTERM)
            restarted_at = time.time()
            bed.start_node(NODES[1])
            (report,) = bed.wait([run], timeout=300)
            return report, restarted_at

    try:
        report, restarted_at = await asyncio.to_thread(train)
    finally:
        await recorder.stop()
    return Restart(
        report,
        recorder.assignments([job_id]),
        restarted_at,
        (bed.root / "run-b.log").read_text(),
    )


async def test_the_run_finishes_every_round(restart: Restart) -> None:
    assert len(restart.report.accuracy) == ROUNDS + 1
    assert restart.report.final_accuracy >= 0.8, restart.report.accuracy


async def test_the_restarted_supernode_is_a_new_device_under_its_new_node_id(
    restart: Restart,
) -> None:
    d3 = [a for a in restart.assignments if device_name(a.device_id) == "d3"]
    before = {a.device_id for a in d3 if a.time < restart.restarted_at}
    after = {a.device_id for a in d3 if a.time > restart.restarted_at}
    assert len(before) == 1 and len(after) == 1 and before != after, (before, after)
    later = [t for t in restart.report.tasks if t.start > restart.restarted_at]
    assert any(t.device == "d3" for t in later), restart.report.tasks


async def test_the_round_replaced_the_node_that_left_within_the_round(restart: Restart) -> None:
    first = restart.report.venn_rounds[0]
    assert first.replacements, first  # a second Venn attempt inside round 1
    assert sorted(first.replied) == ["d3", "d4"], first  # d3: the restarted one
    assert "left mid-round; finding replacements" in restart.run_log
    assert "1 replacement node(s): d3" in restart.run_log
