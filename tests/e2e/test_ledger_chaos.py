"""Issue 25: no input offset unaccounted for, across SIGKILLs, restarts and rebalances.

One workload on Apache Kafka (the demo stack) while the scheduler worker is SIGKILLed and
restarted twice and a second worker joins and leaves: the second is a standby until the
first is killed, then decides until it leaves, and the restarted first decides again.
Commits follow the offset ledger (venn.broker.faust_adapter: a partition's commit is its
lowest offset not handled, dead-lettered, deduplicated or dropped as stale), so once the
work is done, every input partition's committed offset must reach its end offset, for the
scheduler's group and the recorder's; the surviving worker's ledger must have nothing left
behind (its lag, by the ledger, 0 everywhere); every job finishes and the invariants of
design.md hold.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from services.scheduler.stall import GUARD_INTERVAL_S
from tests import invariants
from tests.e2e.harness import DEMO, demo_run
from venn.broker import security, topics
from venn.broker.process import free_port
from venn.settings import Settings
from venn.stack.demo import DemoHandles, DemoResult
from venn.stack.local import service_env
from venn.stack.processes import running_services, scheduler_spec, start_service, stop_pid

pytestmark = pytest.mark.e2e

CONFIG = dataclasses.replace(DEMO, jobs=3, timeout_s=300.0, workers=1)
SCHEDULER_INPUTS = (
    topics.JOBS,
    topics.ROUNDS,
    topics.RESULTS,
    topics.CHECKINS,
    topics.ASSIGNMENTS,
    topics.REVOCATIONS,
)
RECORDER_INPUTS = (topics.JOBS, topics.ROUNDS)
CHANGES = (
    (3.0, "kill scheduler"),
    (10.0, "join scheduler-2"),
    (16.0, "kill scheduler"),
    (24.0, "leave scheduler-2"),
)
"""Wall seconds after the workload starts, and what happens then; a killed worker is
started again at once."""
SETTLE_S = 45.0
"""How long the commits may take to reach the end offsets once the work is done."""

Behind = list[tuple[str, str, int, int, int]]
"""(group, topic, partition, committed, end) of each partition not committed to its end."""


@dataclass
class Report:
    behind: Behind = field(default_factory=list)
    ends: dict[str, int] = field(default_factory=dict)
    """Topic -> records on it (sum of its partitions' end offsets)."""
    lag_lines: list[str] = field(default_factory=list)
    offsets_lines: list[str] = field(default_factory=list)


async def behind(settings: Settings) -> tuple[Behind, dict[str, int]]:
    options = settings.for_role(security.ADMIN).kafka_options
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.broker, **options)
    reader = AIOKafkaConsumer(bootstrap_servers=settings.broker, **options)
    await admin.start()
    await reader.start()
    try:
        parts = [
            TopicPartition(t, p) for t in SCHEDULER_INPUTS for p in range(settings.topic_partitions)
        ]
        ends = await reader.end_offsets(parts)
        late: Behind = []
        for group, inputs in (
            (settings.app_id, SCHEDULER_INPUTS),
            (settings.recorder_group, RECORDER_INPUTS),
        ):
            committed = await admin.list_consumer_group_offsets(group)
            for tp in parts:
                if tp.topic not in inputs:
                    continue
                at = committed[tp].offset if tp in committed else 0
                if at != ends[tp]:
                    late.append((group, tp.topic, tp.partition, at, ends[tp]))
        totals: dict[str, int] = {}
        for tp, end in ends.items():
            totals[tp.topic] = totals.get(tp.topic, 0) + end
        return late, totals
    finally:
        await reader.stop()
        await admin.close()


def scrape(port: int, prefix: str) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5.0) as resp:
        return [line for line in resp.read().decode().splitlines() if line.startswith(prefix)]


def settle(report: Report, handles: DemoHandles) -> Callable[[Settings], Awaitable[None]]:
    async def check(settings: Settings) -> None:
        deadline = time.monotonic() + SETTLE_S
        while True:
            report.behind, report.ends = await behind(settings)
            if not report.behind or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        port = handles.worker_ports["scheduler"]
        # The lag page is set by each pass of the stall guard: one made before the commits
        # caught up can still show a record read and not yet handled. Read it until a pass
        # after that shows it (two passes at most).
        until = time.monotonic() + 2 * GUARD_INTERVAL_S + 1.0
        while True:
            report.lag_lines = scrape(port, "venn_scheduler_consumer_lag{")
            lags = [float(line.split()[1]) for line in report.lag_lines]
            if (lags and not any(lags)) or time.monotonic() > until:
                break
            await asyncio.sleep(1.0)
        report.offsets_lines = scrape(port, "venn_scheduler_offsets_total{")

    return check


async def chaos(handles: DemoHandles, log: list[str]) -> None:
    while handles.phase != "running":
        await asyncio.sleep(0.2)
    assert handles.settings is not None and handles.run_dir is not None
    run, settings = handles.run_dir, handles.settings
    loop = asyncio.get_running_loop()
    start = loop.time()

    def launch(worker: int) -> None:
        spec = scheduler_spec(worker)
        env = service_env(settings.for_role("scheduler"), CONFIG.policy, CONFIG.trace_seed)
        port = handles.worker_ports[spec.name] = free_port()
        env["VENN_SCHEDULER_WEB_PORT"] = str(port)
        start_service(run, spec, env, detached=False)

    for at, change in CHANGES:
        await asyncio.sleep(max(0.0, start + at - loop.time()))
        if handles.phase != "running":
            return
        what, name = change.split()
        if what == "kill":
            os.kill(running_services(run)[name], signal.SIGKILL)
            launch(1)
        elif what == "join":
            launch(2)
        else:
            assert await asyncio.to_thread(stop_pid, running_services(run)[name], 20.0)
            del handles.worker_ports[name]
        log.append(change)


@pytest.fixture(scope="module")
async def run(
    broker_kind: str, pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[DemoResult, Report, list[str]]]:
    run_dir = Path(tmp_path_factory.mktemp("ledger-chaos"))
    handles, log, report = DemoHandles(), list[str](), Report()
    handles.before_teardown = settle(report, handles)
    changes = asyncio.create_task(chaos(handles, log))
    async with demo_run(CONFIG, pg_admin_url, run_dir, broker_kind, handles) as result:
        await changes  # raises if a change could not be made
        print(
            f"ledger chaos: startup {result.startup_s:.1f} s, workload {result.wall_s:.1f} s, "
            f"changes {log}, topics {report.ends}"
        )
        yield result, report, log


async def test_every_change_was_made(run: tuple[DemoResult, Report, list[str]]) -> None:
    _, _, log = run
    assert log == [change for _, change in CHANGES]


async def test_no_offset_unaccounted_for(run: tuple[DemoResult, Report, list[str]]) -> None:
    _, report, _ = run
    assert report.ends[topics.JOBS] and report.ends[topics.CHECKINS]
    assert report.behind == [], f"committed short of the end offsets: {report.behind}"
    lags = {line.split()[0]: float(line.split()[1]) for line in report.lag_lines}
    assert lags and set(lags.values()) == {0.0}, lags
    # The surviving worker's ledger accounted for what it read since its restart.
    assert any('outcome="handled"' in line for line in report.offsets_lines)


async def test_every_job_finishes_with_the_invariants(
    run: tuple[DemoResult, Report, list[str]],
) -> None:
    result, _, _ = run
    assert result.jobs_finished == result.jobs_total == CONFIG.jobs
    invariants.assert_all_hold(result)
