"""Failover on Apache Kafka: three scheduler workers, one decides and two are hot standbys;
the decider is SIGKILLed while a round is being filled, a standby becomes the decider and
assigns, and the invariants of design.md hold across the handover: devices only get jobs
they are eligible for, a device holding an assignment gets no second one (the successor
restored who is busy from the tables), and the round gets no more than its demand.

Timing is measured by bench/failover_bench.py, not here: this test only needs the new
decider to assign before a generous timeout.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

import pytest
from aiokafka import AIOKafkaProducer

from devtools.stack.processes import settled_decider
from services.scheduler.process import kill_worker, start_worker, stop_worker
from tests.broker.scheduler_bus import checkin, scheduler_env
from tests.event_recorder import EventRecorder
from venn import events as ev
from venn.broker import topics
from venn.net import free_port

WORKERS = 3
DEMAND = 8
BEFORE_KILL = 4
"""Devices assigned before the kill (exactly: no more eligible devices check in before it);
the successor fills the rest of the round."""
SETTLE_S = 180.0
"""Longest wait for a settled group (a new group of three rebalances once per member) and
for the successor's first assignment (on a loaded CI machine)."""


@dataclass
class Cluster:
    bootstrap: str
    env: dict[str, str]
    log_dir: Path
    procs: dict[str, Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def start(self, name: str) -> None:
        port = self.ports[name] = free_port()
        with open(self.log_dir / f"{self.env['VENN_APP_ID']}-{name}.log", "ab") as log:
            self.procs[name] = start_worker(
                {**self.env, "VENN_SCHEDULER_WEB_PORT": str(port)}, log, level="info"
            )

    def diagnosis(self) -> str:
        """The scheduler counters of every live worker."""
        out = []
        for name, port in self.alive().items():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError as exc:
                text = repr(exc)
            wanted = [
                line
                for line in text.splitlines()
                if line.startswith("venn_scheduler_") and not line.startswith("venn_scheduler_p")
            ]
            out.append(f"{name}:\n" + "\n".join(wanted))
        return "\n".join(out)

    def alive(self) -> dict[str, int]:
        return {n: p for n, p in self.ports.items() if self.procs[n].poll() is None}

    async def settled(self, timeout: float = SETTLE_S) -> str:
        """The decider, once every live worker reports and exactly one decides."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            decider = await asyncio.to_thread(settled_decider, self.alive())
            if decider is not None:
                return decider
            await asyncio.sleep(0.5)
        raise AssertionError(f"no settled group of {self.alive()} in {timeout:.0f} s")


@pytest.fixture
async def cluster(
    broker: str, broker_kind: str, run_dir: Path, partitions: int
) -> AsyncIterator[Cluster]:
    env = await scheduler_env(
        broker, run_dir, partitions, "failover",
        VENN_BROKER_KIND=broker_kind,  # its client profile (venn/broker/tuning.py)
        VENN_POLICY="venn",
    )  # fmt: skip
    c = Cluster(broker, env, run_dir)
    try:
        for i in range(WORKERS):
            c.start(f"w{i}")
        yield c
    finally:
        for proc in c.procs.values():
            stop_worker(proc, timeout=10)


async def test_a_standby_decides_after_the_decider_is_killed(cluster: Cluster) -> None:
    tok = uuid.uuid4().hex[:8]
    attr, job_id = f"cpu_{tok}", f"failover-{tok}"
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    recorder = await EventRecorder(cluster.bootstrap, (topics.ASSIGNMENTS,)).start()

    async def send(topic: str, event: ev.Event) -> None:
        await producer.send_and_wait(topic, ev.encode(event), key=ev.key_of(event))

    def assigned() -> dict[str, ev.Assignment]:
        """Id -> its first publication: the successor publishes again what its tables say
        devices hold, with the same ids (and a later time)."""
        first: dict[str, ev.Assignment] = {}
        for a in recorder.assignments({job_id}):
            first.setdefault(a.event_id, a)
        return first

    eligible, weak = {attr: 3.0}, {attr: 0.5}
    weaklings = [f"weak{i}-{tok}" for i in range(2)]
    sent: list[str] = []  # eligible devices, in the order they checked in

    async def check_in(*again: str) -> None:
        """A new eligible device, ``again`` and the ineligible ones check in."""
        sent.append(f"dev{len(sent)}-{tok}")
        await check_in_again(sent[-1], *again)

    async def check_in_again(*devices: str) -> None:
        for device in devices:
            await send(topics.CHECKINS, checkin(device, eligible))
        for device in weaklings:
            await send(topics.CHECKINS, checkin(device, weak))

    try:
        decider = await cluster.settled()
        await send(
            topics.JOBS,
            ev.JobRegistered(
                event_id=f"reg-{job_id}", time=time.time(), job_id=job_id,
                requirement={attr: 1.0}, demand=DEMAND, rounds=2, deadline_s=600,
                workload_s=5,
            ),
        )  # fmt: skip
        await send(
            topics.JOBS,
            ev.RoundRequested(
                event_id=f"rr-{job_id}-0", time=time.time(), job_id=job_id, round_index=0,
                demand=DEMAND,
            ),
        )  # fmt: skip
        # BEFORE_KILL eligible devices, and no more, check in until each is assigned (the
        # first may come before the decider has read the job: no ordering across topics).
        # With more, a decider that fell behind under load filled the whole round in one
        # decision before the kill, and no assignment could follow it (issue 32, failure 1).
        deadline = time.monotonic() + 60.0
        while len(assigned()) < BEFORE_KILL:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(assigned())} of {BEFORE_KILL} assigned\n{cluster.diagnosis()}"
                )
            if len(sent) < BEFORE_KILL:
                await check_in()
            else:
                waiting = set(sent) - {a.device_id for a in assigned().values()}
                await check_in_again(*sorted(waiting))
            await asyncio.sleep(0.3)
        killed_at = time.time()
        kill_worker(cluster.procs[decider])
        # Every decision of the decider is in its tables before it is published: the
        # successor restores who is busy and what the round still needs.
        await asyncio.sleep(1.0)  # what was on its way to the broker has landed
        busy = [a.device_id for a in assigned().values()]
        assert len(busy) == BEFORE_KILL < DEMAND, f"the round had no room left at the kill: {busy}"

        # Fresh check-ins until the successor assigns: a new eligible device each time,
        # the devices holding an assignment again, and the ineligible ones.
        deadline = time.monotonic() + SETTLE_S
        while not any(a.time > killed_at for a in assigned().values()):
            if time.monotonic() > deadline:
                # Seen once under load (3 pytest workers): what the workers read and decided.
                raise AssertionError(
                    f"no assignment after the decider was killed\n{cluster.diagnosis()}"
                )
            await check_in(*busy)
            await asyncio.sleep(0.5)
        successor = await cluster.settled()
        # More eligible devices than the round still needs: it must stop at its demand.
        for _ in range(DEMAND):
            await check_in(*busy)
        await recorder.wait_for(lambda: len(assigned()) >= DEMAND, 60.0)
        await asyncio.sleep(3.0)  # room for an assignment too many
        made = list(assigned().values())
    finally:
        await recorder.stop()
        await producer.stop()

    first = min(a.time for a in made if a.time > killed_at) - killed_at
    assert successor != decider and cluster.procs[decider].poll() is not None
    devices = [a.device_id for a in made]
    assert len(made) == DEMAND, f"{len(made)} assignments for a demand of {DEMAND}"
    assert len(set(devices)) == len(devices), "a device holding an assignment got another"
    assert set(devices) <= set(sent), "an ineligible device was assigned"
    after = [a for a in made if a.time > killed_at]
    assert after and not set(busy) & {a.device_id for a in after}, (
        f"first assignment {first:.1f} s after the kill"
    )
