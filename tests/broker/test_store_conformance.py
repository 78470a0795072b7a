"""One conformance suite for the scheduler store port (`services.scheduler.store`), run
against every implementation, as Flower tests its LinkState: the tests live in an abstract
class that drives a store through `StoreDriver`, and one subclass per implementation says
how to reach it.

- `TestMemoryStore`: `MemoryStore` in this process.
- `TestFaustStore`: `FaustStore` in a real Faust worker (tests/broker/store_probe.py, a
  subprocess) on the session's Apache Kafka; its kill-and-restore SIGKILLs the worker once
  the store said its writes are durable and starts a new one, which restores the tables
  from their changelogs.

Each test writes rows under its own key prefix, so that one worker serves the whole class.
"""

from __future__ import annotations

import abc
import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import msgspec
import pytest

from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from tests.broker.store_probe import Op, apply_op, text_rows
from venn import events as ev
from venn.broker.topics import changelog_topic, ensure_topics
from venn.net import free_port
from venn.settings import SchedulerSettings

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
WAIT_S = 120.0
Rows = dict[str, str]
"""key -> row, each the text of its bytes."""


class StoreDriver(abc.ABC):
    """How the suite reaches one store."""

    durable: ClassVar[bool]
    """Does the store outlive the process holding it (kill-and-restore applies)?"""

    @abc.abstractmethod
    async def write(self, ops: list[Op]) -> None:
        """Apply ``ops`` in order; the store reads them, durable, when this returns."""

    @abc.abstractmethod
    async def read(self) -> tuple[Rows, Rows]:
        """(job rows, round rows) the store hands back."""

    async def kill_and_restore(self) -> None:
        """Kill the process holding the store without a clean stop; restore the store in a
        new one."""
        raise NotImplementedError


class MemoryDriver(StoreDriver):
    durable = False

    def __init__(self) -> None:
        self.store = MemoryStore()

    async def write(self, ops: list[Op]) -> None:
        for op in ops:
            apply_op(self.store, op)

    async def read(self) -> tuple[Rows, Rows]:
        return _rows(text_rows(self.store.job_rows())), _rows(text_rows(self.store.round_rows()))


class FaustDriver(StoreDriver):
    """A store probe worker (subprocess), fed over HTTP."""

    durable = True

    def __init__(self, broker: str, run_dir: Path) -> None:
        tok = uuid.uuid4().hex[:8]
        self.broker = broker
        self.app_id = f"store-{tok}"
        self.log_path = run_dir / f"{self.app_id}.log"
        self.datadir = run_dir / f"{self.app_id}-data"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        names = (changelog_topic(self.app_id, "jobs"), changelog_topic(self.app_id, "round"))
        await ensure_topics(self.broker, PARTITIONS, names=names)
        self.http = aiohttp.ClientSession()
        self._spawn()
        await self._body()

    async def stop(self) -> None:
        self._kill()
        if self.http is not None:
            await self.http.close()

    def _spawn(self) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "STORE_BROKER": self.broker,
            "STORE_APP_ID": self.app_id,
            "STORE_PARTITIONS": str(PARTITIONS),
            "STORE_WEB_PORT": str(self.port),
            "STORE_DATADIR": str(self.datadir),
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.broker.store_probe", "worker", "-l", "info"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def _log_tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])

    async def _body(self) -> dict[str, Any]:
        """The probe's /rows once it decides with its tables restored."""
        assert self.http is not None
        deadline = time.monotonic() + WAIT_S
        while True:
            assert self.proc is not None and self.proc.poll() is None, self._log_tail()
            try:
                async with self.http.get(f"http://127.0.0.1:{self.port}/rows") as resp:
                    if resp.status == 200:
                        body: dict[str, Any] = msgspec.json.decode(await resp.read())
                        return body
            except aiohttp.ClientError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise AssertionError(f"store probe not ready in {WAIT_S:.0f} s\n{self._log_tail()}")
            await asyncio.sleep(0.2)

    async def write(self, ops: list[Op]) -> None:
        assert self.http is not None
        await self._body()
        async with self.http.post(
            f"http://127.0.0.1:{self.port}/ops", data=msgspec.json.encode(ops)
        ) as resp:
            assert resp.status == 200, await resp.text()

    async def read(self) -> tuple[Rows, Rows]:
        body = await self._body()
        return _rows(body["jobs"]), _rows(body["rounds"])

    async def kill_and_restore(self) -> None:
        # `write` returned once the store said the rows are durable: a SIGKILL now loses
        # none of them.
        self._kill()
        self._spawn()
        await self._body()


def _rows(pairs: list[Any]) -> Rows:
    return {key: row for key, row in pairs}


def _mine(rows: Rows, prefix: str) -> Rows:
    return {key: row for key, row in rows.items() if key.startswith(prefix)}


def job_row(**extra: Any) -> str:
    return msgspec.json.encode(
        {
            "removed": False,
            "submit_token": None,
            "core": {"demand": 5, "rounds_done": 1, "tier": None, "ratio": 0.25, "ok": True},
            **extra,
        }
    ).decode()


def round_row(job: str, device: str) -> str:
    items = [[f"a-{device}", device, 1, True], [f"b-{device}", f"{device}x", None, False]]
    return msgspec.json.encode({"job": job, "round": 0, "items": items}).decode()


def key(text: str) -> str:
    """A row's key as the scheduler stores it (a JSON string)."""
    return msgspec.json.encode(text).decode()


class StoreConformance:
    """The tests; a subclass provides ``driver``."""

    __test__ = False

    @pytest.fixture
    def prefix(self) -> str:
        return f"{uuid.uuid4().hex[:6]}-"

    async def test_rows_read_back_as_written(self, driver: StoreDriver, prefix: str) -> None:
        jobs = {f"{prefix}j{p}": job_row() for p in range(PARTITIONS)}
        rounds = {f"a:{prefix}b{p}": round_row(f"{prefix}j{p}", f"d{p}") for p in range(PARTITIONS)}
        ops = [put("put_job", k, r) for k, r in jobs.items()]
        ops += [put("put_round", k, r) for k, r in rounds.items()]
        await driver.write(ops)
        found_jobs, found_rounds = await driver.read()
        assert _mine(found_jobs, prefix) == jobs
        assert _mine(found_rounds, f"a:{prefix}") == rounds
        assert not _mine(found_rounds, prefix), "a job row read back as a round row"

    async def test_a_row_written_again_replaces_the_first(
        self, driver: StoreDriver, prefix: str
    ) -> None:
        key = f"{prefix}j"
        await driver.write([put("put_job", key, job_row())])
        again = job_row(removed=True)
        await driver.write([put("put_job", key, again)])
        found, _ = await driver.read()
        assert _mine(found, prefix) == {key: again}

    async def test_deleted_round_rows_are_gone_and_the_rest_stay(
        self, driver: StoreDriver, prefix: str
    ) -> None:
        keys = [f"r:{prefix}j:0:d{i}" for i in range(4)]
        await driver.write([put("put_round", k, round_row(f"{prefix}j", k)) for k in keys])
        await driver.write([delete([*keys[:3], f"r:{prefix}never-written"])])
        _, found = await driver.read()
        assert set(_mine(found, f"r:{prefix}")) == {keys[3]}

    async def test_kill_and_restore_reads_back_equal(
        self, driver: StoreDriver, prefix: str
    ) -> None:
        if not driver.durable:
            pytest.skip("an in-memory store ends with its process")
        jobs = {f"{prefix}j{p}": job_row(submit_token=f"t{p}") for p in range(PARTITIONS)}
        rounds = {
            f"a:{prefix}b{p}{i}": round_row(f"{prefix}j{p}", f"d{p}{i}")
            for p in range(PARTITIONS)
            for i in range(3)
        }
        ops = [put("put_job", k, r) for k, r in jobs.items()]
        ops += [put("put_round", k, r) for k, r in rounds.items()]
        gone = [k for k in rounds if k.endswith("0")]  # deleted before the kill
        ops.append(delete(gone))
        ops.append(put("put_job", f"{prefix}j0", job_row(removed=True)))
        await driver.write(ops)
        before = await driver.read()
        assert len(_mine(before[1], f"a:{prefix}")) == len(rounds) - len(gone)

        await driver.kill_and_restore()

        after = await driver.read()
        assert _mine(after[0], prefix) == _mine(before[0], prefix)
        assert _mine(after[1], f"a:{prefix}") == _mine(before[1], f"a:{prefix}")
        assert after == before, "rows of other tests changed across the restore"

    async def test_a_state_rebuilt_from_the_rows_read_back_decides_as_before(
        self, driver: StoreDriver, prefix: str
    ) -> None:
        first = worked_state(prefix)
        assert isinstance(first.store, MemoryStore)
        written = [("put_job", first.store.jobs), ("put_round", first.store.rounds)]
        ops = [
            put(kind, k.decode(), r)
            for kind, table in written
            for k, r in table.items()
            if isinstance(r, bytes)
        ]
        await driver.write(ops)
        if driver.durable:
            await driver.kill_and_restore()
        jobs, rounds = await driver.read()
        mine_jobs: dict[bytes, object] = {
            k.encode(): r.encode() for k, r in _mine(jobs, key(prefix)[:-1]).items()
        }
        mine_rounds: dict[bytes, object] = {
            k.encode(): r.encode()
            for k, r in rounds.items()
            if str(msgspec.json.decode(r).get("job")).startswith(prefix)
        }
        rebuilt = SchedulerState(first.config, MemoryStore(mine_jobs, mine_rounds))
        rebuilt.ensure_loaded(time.time())
        assert rebuilt.unreadable_rows == 0
        assert core_view(rebuilt) == core_view(first)
        assert core_view(first)["busy"], "the round holds devices: a rebuild has work to do"


def worked_state(prefix: str) -> SchedulerState:
    """A worker's state after a round's assignments and results, on a `MemoryStore`:
    the rows a real worker writes."""
    now = time.time()
    state = SchedulerState(SchedulerSettings(policy="fifo"), MemoryStore())
    state.ensure_loaded(now)
    for p in range(PARTITIONS):
        job = f"{prefix}j{p}"
        state.on_job_event(
            ev.JobRegistered(
                event_id=f"reg-{job}", time=now, job_id=job, requirement={"ram": 4.0},
                demand=3, rounds=2, deadline_s=600, workload_s=5,
            ),
            now,
        )  # fmt: skip
        rr = ev.RoundRequested(event_id=f"rr-{job}", time=now, job_id=job, round_index=0, demand=3)
        state.on_job_event(rr, now)
    checkins = [
        ev.DeviceCheckin(
            event_id=f"c{i}", time=now, device_id=f"{prefix}d{i}", attrs={"ram": 8.0},
            speed_ms_per_sample=60.0, bandwidth_kbps=12000.0,
        )
        for i in range(5)
    ]  # fmt: skip
    for out in state.on_checkin_batch(
        ev.CheckinBatch(event_id="b", time=now, checkins=checkins), now
    ):
        assert isinstance(out, ev.AssignmentBatch)
    job0 = f"{prefix}j0"
    view = state.core.round_view(job0)
    assert view is not None
    device = next(d for d, (job, _) in state.core.active_devices.items() if job == job0)
    result = ev.DeviceResult(
        event_id="res", time=now, job_id=job0, round_index=view.round_index,
        device_id=str(device), ok=True, response_time_s=7.0,
    )  # fmt: skip
    state.on_result(result, now)
    return state


def core_view(state: SchedulerState) -> dict[str, Any]:
    """What a rebuild must give back: each job's round and demand, and the busy devices."""
    return {
        "jobs": {
            j: (js.round_index, js.round_open, js.remaining, js.assigned)
            for j, js in state.core.jobs.items()
        },
        "busy": dict(state.core.active_devices),
    }


def put(kind: str, key: str, row: str | bytes) -> Op:
    return {"op": kind, "key": key, "row": row.decode() if isinstance(row, bytes) else row}


def delete(keys: list[str]) -> Op:
    return {"op": "delete_rounds", "keys": keys}


class TestMemoryStore(StoreConformance):
    __test__ = True

    @pytest.fixture
    def driver(self) -> StoreDriver:
        return MemoryDriver()


class TestFaustStore(StoreConformance):
    __test__ = True

    @pytest.fixture(scope="class")
    @classmethod
    async def driver(cls, broker: str, run_dir: Path) -> AsyncIterator[StoreDriver]:
        driver = FaustDriver(broker, run_dir)
        await driver.start()
        try:
            yield driver
        finally:
            await driver.stop()
