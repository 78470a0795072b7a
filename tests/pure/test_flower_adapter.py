"""venn-flower's parts without Kafka: node profiles and Venn device ids, the messages' Venn
records, mapping devices to Flower nodes, the grids, the strategy's guards, its fallback
when Venn is unreachable, silent or back (over an in-memory grid whose nodes run real
ClientApps, and a scripted bridge on loopback), the mod, the launcher's task bookkeeping,
and the run reports' checks. (The whole path with real flwr processes, Kafka and Venn:
tests/e2e/test_flower.py.)"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.proto.node_pb2 import NodeInfo
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity
from venn_flower.agent import NodeAgent
from venn_flower.bridge import Bridge
from venn_flower.grids import ChosenGrid, RoundGrid
from venn_flower.mod import LegacyClientApp, answer_venn_queries, venn_mod
from venn_flower.nodes import EligibleNodes, nodes_of
from venn_flower.profile import (
    NodeConfigError,
    NodeProfile,
    device_name,
    parse_node_config,
    split_device_id,
    venn_device_id,
)
from venn_flower.protocol import (
    RoundTag,
    mark_reply,
    profile_answer,
    profile_of,
    profile_query,
    reply_mark,
    tag,
    tag_of,
)
from venn_flower.strategy import VennDown, VennJob, VennStrategy

from devtools.flower_testbed.node import Ineligible, check_eligible, parse_requirement
from devtools.flower_testbed.report import (
    RunReport,
    Task,
    VennRound,
    overlaps,
    tasks_overlapping,
    unassigned_work,
)
from devtools.flower_testbed.server import dispatch_times
from venn.net import free_port


@pytest.fixture(autouse=True)
def flower_run() -> Iterator[None]:
    """Flower builds messages only inside a run (a ServerApp or ClientApp process)."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1
    yield
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None  # type: ignore[assignment]


def profile(text: str) -> NodeProfile:
    return NodeProfile.from_node_config(parse_node_config(text))


# -- nodes, devices and messages -------------------------------------------------------


def test_a_node_config_gives_the_devices_name_attributes_and_speed() -> None:
    p = profile("device-id='d3' attr.cpu_f=4 attr.ram=8.5 speed-ms=2.5 seed=3")
    assert p == NodeProfile("d3", {"cpu_f": 4.0, "ram": 8.5}, 2.5)
    assert p.checkin_body("d3@42")["device_id"] == "d3@42"
    assert p.checkin_body()["attrs"] == {"cpu_f": 4.0, "ram": 8.5}
    assert profile("device-id='x'").attrs == {}
    assert p.meets({"ram": 8}) and not p.meets({"ram": 16}) and not p.meets({"gpu": 1})


@pytest.mark.parametrize(
    "text",
    [
        "attr.ram=8",
        "device-id=3",
        "device-id='d' attr.ram='big'",
        "device-id='d' speed-ms=true",
        "device-id='d@1'",
        "device-id='d' attr.ram=[",
    ],
)
def test_a_node_config_that_is_no_device_is_refused_clearly(text: str) -> None:
    with pytest.raises(NodeConfigError):
        profile(text)


def test_a_launched_nodes_venn_device_id_carries_its_flower_node_id() -> None:
    device = venn_device_id("d3", 1234567890123456789)
    assert device == "d3@1234567890123456789"
    assert split_device_id(device) == ("d3", 1234567890123456789)
    assert split_device_id("d3") == ("d3", None)
    assert split_device_id("a@b") == ("a@b", None)
    assert device_name(device) == "d3"


def test_devices_map_to_online_nodes_without_asking_them() -> None:
    online = [NodeInfo(node_id=11), NodeInfo(node_id=12), NodeInfo(node_id=13, name="d7")]
    found = nodes_of(["d1@11", "d2@12", "d7", "d3@99", "d8"], online)
    # d3's node id is not online (a SuperNode that has gone); d8 is no node's name.
    assert found == {"d1@11": 11, "d2@12": 12, "d7": 13}
    # A restarted SuperNode is a new device under its new node id; the old one is gone.
    assert nodes_of(["d1@11", "d1@21"], [NodeInfo(node_id=21)]) == {"d1@21": 21}


def test_a_message_carries_its_venn_round_and_the_reply_the_mods_mark() -> None:
    content = RecordDict({"config": ConfigRecord({"lr": 0.1})})
    msg = Message(content, message_type="train", dst_node_id=5)
    assert tag_of(msg) is None
    tag(msg, RoundTag("job-a", 3))
    assert tag_of(msg) == RoundTag("job-a", 3)
    reply = Message(RecordDict({"metrics": MetricRecord({"n": 1})}), reply_to=msg)
    assert reply_mark(reply) == (False, False)
    mark_reply(reply, reported=True)
    assert reply_mark(reply) == (True, True)
    assert list(reply.content.keys()) == ["metrics"]  # the mark is taken off


def test_a_node_answers_the_profile_query_with_its_name_and_attributes() -> None:
    query = profile_query(5)
    answer = profile_answer(query, NodeProfile("d5", {"ram": 8.0, "cpu_f": 6.0}))
    assert profile_of(answer) == NodeProfile("d5", {"ram": 8.0, "cpu_f": 6.0})
    eligible = EligibleNodes({"ram": 8.0})
    eligible.answered(5, profile_of(answer))
    eligible.answered(6, NodeProfile("d6", {"ram": 4.0}))
    eligible.answered(7, None)
    eligible.assigned({"d9@9": 9})
    assert eligible.online([5, 6, 7, 9, 10]) == {5: "d5", 9: "d9"}
    assert eligible.unasked([5, 6, 7, 9, 10]) == [10]


# -- the grids ---------------------------------------------------------------------------


@dataclass
class MemoryNode:
    name: str
    attrs: dict[str, float]
    app: ClientApp
    delay_s: float = 0.0
    """When its reply is ready after the message is pushed (inf: never)."""

    def context(self, node_id: int) -> Context:
        config: dict[str, Any] = {"device-id": self.name}
        config.update({f"attr.{k}": v for k, v in self.attrs.items()})
        return Context(
            run_id=7, node_id=node_id, node_config=config, state=RecordDict(), run_config={}
        )


@dataclass
class MemoryGrid(Grid):
    """Online nodes running real ClientApps in this process."""

    nodes: dict[int, MemoryNode]
    pushed: list[Message] = field(default_factory=list)
    ready: dict[str, tuple[float, Message]] = field(default_factory=dict)

    def set_run(self, run: Any) -> None:
        raise NotImplementedError

    @property
    def run(self) -> Any:
        raise NotImplementedError

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content=content, message_type=message_type, dst_node_id=dst_node_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def get_nodes(self) -> Iterable[NodeInfo]:
        return [NodeInfo(node_id=n) for n in self.nodes]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for m in messages:
            # What Flower's own grid does when it pushes a message (its id is its hash).
            m.metadata.__dict__["_message_id"] = m.object_id
            self.pushed.append(m)
            node = self.nodes[m.metadata.dst_node_id]
            # The node gets a message of its own, as over the wire (FedAvg shares one
            # RecordDict among a round's messages).
            own = Message(  # type: ignore[call-overload]  # flwr's own way of rebuilding one
                content=RecordDict(dict(m.content.items())), metadata=copy.copy(m.metadata)
            )
            try:
                reply = node.app(own, node.context(m.metadata.dst_node_id))
            except Exception as exc:  # as flwr-clientapp answers: an error reply
                reply = Message(Error(code=2, reason=repr(exc)), reply_to=m)
            self.ready[m.metadata.message_id] = (time.monotonic() + node.delay_s, reply)
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        now = time.monotonic()
        due = [i for i in message_ids if i in self.ready and self.ready[i][0] <= now]
        return [self.ready.pop(i)[1] for i in due]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        ids = list(self.push_messages(messages))
        return [self.ready.pop(i)[1] for i in ids if self.ready[i][0] != float("inf")]


def numpy_app(with_mod: bool = True, queries: bool = True) -> ClientApp:
    """A Message-API ClientApp that adds one to the model; it fails if it sees Venn's
    record (the mod takes it off)."""
    app = ClientApp(mods=[venn_mod] if with_mod else [])
    if queries:
        answer_venn_queries(app)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        assert not with_mod or "venn" not in message.content, "the app saw Venn's record"
        arrays = message.content.array_records["arrays"].to_numpy_ndarrays()
        content = RecordDict(
            {
                "arrays": ArrayRecord([a + 1 for a in arrays]),
                "metrics": MetricRecord({"num-examples": 10}),
            }
        )
        return Message(content, reply_to=message)

    return app


def grid_of(spec: dict[int, tuple[str, dict[str, float], float]], app: ClientApp) -> MemoryGrid:
    return MemoryGrid({n: MemoryNode(name, attrs, app, d) for n, (name, attrs, d) in spec.items()})


class Target:
    def __init__(self, n: int) -> None:
        self.n = n
        self.watched = 0

    def target(self, sent: int) -> int:
        return self.n

    def open(self) -> bool:
        return False

    def more(self) -> list[Message]:
        return []

    def waiting(self, lost: dict[str, Message], ok: int) -> list[Message]:
        self.watched += 1
        return []


def test_a_wrapped_strategy_sees_only_the_nodes_venn_assigned() -> None:
    grid = grid_of({i: (f"d{i}", {}, 0.0) for i in range(1, 5)}, numpy_app())
    inner = FedAvg(fraction_train=1.0, min_train_nodes=1, min_available_nodes=1)
    messages = inner.configure_train(
        1, ArrayRecord([np.zeros(2)]), ConfigRecord(), ChosenGrid(grid, [2, 4])
    )
    assert sorted(m.metadata.dst_node_id for m in messages) == [2, 4]
    assert [n.node_id for n in ChosenGrid(grid, [2, 4]).get_nodes()] == [2, 4]


def test_a_round_ends_at_its_target_without_waiting_for_the_slowest_node() -> None:
    # Node 5 never answers: were the round to wait for every reply, it would never end.
    spec: dict[int, tuple[str, dict[str, float], float]] = {
        i: (f"d{i}", {}, 0.0) for i in range(1, 5)
    }
    grid = grid_of({**spec, 5: ("d5", {}, float("inf"))}, numpy_app(with_mod=False))
    messages = [
        Message(
            RecordDict({"arrays": ArrayRecord([np.zeros(1)]), "config": ConfigRecord()}),
            message_type="train",
            dst_node_id=n,
        )
        for n in range(1, 6)
    ]
    replies = list(RoundGrid(grid, Target(4), poll_s=0.01).send_and_receive(messages))
    assert sorted(r.metadata.src_node_id for r in replies) == [1, 2, 3, 4]


# -- the strategy's guards ------------------------------------------------------------------


def job(demand: int = 3, **kw: Any) -> VennJob:
    return VennJob("flwr-test", {"ram": 8}, demand, **kw)


DOWN = Bridge(f"http://127.0.0.1:{free_port()}", timeout_s=2)
"""Nothing listens there: Venn is down."""


def test_a_strategy_that_would_leave_assigned_nodes_idle_is_refused() -> None:
    with pytest.raises(ValueError, match=r"fraction_train=0\.5"):
        VennStrategy(FedAvg(fraction_train=0.5, min_train_nodes=1), job(), bridge=DOWN)
    with pytest.raises(ValueError, match=r"fraction_evaluate=0\.5"):
        VennStrategy(FedAvg(fraction_evaluate=0.5, min_train_nodes=1), job(), bridge=DOWN)


def test_federated_evaluation_asks_venn_for_nodes_unless_told_otherwise() -> None:
    # FedAvg() evaluates on nodes: its evaluation rounds ask Venn for the training demand.
    assert VennStrategy(FedAvg(), job(), bridge=DOWN).evaluate_demand == 3
    assert VennStrategy(FedAvg(), job(evaluate_demand=2), bridge=DOWN).evaluate_demand == 2
    assert VennStrategy(FedAvg(fraction_evaluate=0.0), job(), bridge=DOWN).evaluate_demand == 0
    with pytest.raises(ValueError, match="evaluate_demand=0"):
        VennStrategy(FedAvg(), job(evaluate_demand=0), bridge=DOWN)


def test_the_strategys_own_minimum_of_nodes_is_kept_or_refused() -> None:
    # FedAvg() waits for 2 nodes: a round starts with at least 2.
    assert VennStrategy(FedAvg(), job(), bridge=DOWN).min_nodes == 2
    with pytest.raises(ValueError, match="at most 1"):
        VennStrategy(FedAvg(), job(demand=1), bridge=DOWN)
    with pytest.raises(ValueError, match="min_nodes=1"):
        VennStrategy(FedAvg(), job(min_nodes=1), bridge=DOWN)


def test_a_legacy_strategy_is_refused_with_what_to_use_instead() -> None:
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    with pytest.raises(TypeError, match="Message-API strategies"):
        VennStrategy(LegacyFedAvg(), job(), bridge=DOWN)  # type: ignore[arg-type]


# -- the ClientApp side ---------------------------------------------------------------------


def train_message(node: int = 3) -> Message:
    content = RecordDict({"arrays": ArrayRecord([np.zeros(3)]), "config": ConfigRecord()})
    message = Message(content, message_type="train", dst_node_id=node)
    tag(message, RoundTag("job-a", 1))
    return message


def test_the_mod_hides_venns_record_from_the_app_and_marks_the_reply() -> None:
    node = MemoryNode("d3", {"ram": 8.0}, numpy_app())
    reply = node.app(train_message(), node.context(3))
    assert not reply.has_error(), reply.error
    assert reply_mark(reply) == (True, False)  # no launcher here to take the task's end


def test_the_mod_answers_the_profile_query() -> None:
    node = MemoryNode("d3", {"ram": 8.0}, numpy_app())
    reply = node.app(profile_query(3), node.context(3))
    assert profile_of(reply) == NodeProfile("d3", {"ram": 8.0})


def test_a_numpyclient_app_gets_a_clear_error() -> None:
    class Legacy(NumPyClient):
        def fit(self, parameters: Any, config: Any) -> Any:
            return parameters, 1, {}

    app = ClientApp(client_fn=lambda context: Legacy().to_client(), mods=[venn_mod])
    node = MemoryNode("d3", {}, app)
    with pytest.raises(LegacyClientApp, match=r"@app.train\(\)"):
        app(train_message(), node.context(3))


async def test_a_launcher_refuses_a_task_of_a_round_it_no_longer_holds() -> None:
    agent = NodeAgent(NodeProfile("d1"), "http://127.0.0.1:1", None)
    assert agent.task_started(RoundTag("a", 1))  # nothing assigned yet: go
    agent.task_ended(None, True, 0.1, "")
    agent.latest = RoundTag("b", 4)  # the node was given to run b since
    assert not agent.task_started(RoundTag("a", 1))
    assert agent.task_started(RoundTag("b", 4))
    assert agent.task_started(None)  # a task a run sampled itself (Venn unreachable)
    assert agent.stats.stale_tasks == 1 and agent.busy == 2


async def test_an_assignment_holds_the_node_until_its_task_ends_or_the_hold_passes() -> None:
    """Check-ins between an assignment and its task gave the node to another round and its
    task was refused as stale (test_flower_nodes in CI): the launcher waits for the task."""
    checkins: list[float] = []
    results: list[dict[str, Any]] = []

    async def checkin(request: web.Request) -> web.Response:
        checkins.append(time.monotonic())
        return web.json_response(
            {"assigned": True, "job_id": "a", "round_index": len(checkins), "task_url": "",
             "checkin_id": str(len(checkins))}
        )  # fmt: skip

    async def result(request: web.Request) -> web.Response:
        results.append(await request.json())
        return web.json_response({}, status=202)

    app = web.Application()
    app.router.add_post("/v1/checkin", checkin)
    app.router.add_post("/v1/results", result)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    agent = NodeAgent(NodeProfile("d1"), f"http://127.0.0.1:{port}", None, interval_s=0.05)
    agent.hold_s = 1.0
    stop = asyncio.Event()
    running = asyncio.ensure_future(agent.run(stop))
    try:
        await asyncio.sleep(0.5)
        assert len(checkins) == 1  # not one every 0.05 s: the assignment holds it
        assert agent.task_started(RoundTag("a", 1))  # its task: not refused as stale
        agent.task_ended(RoundTag("a", 1), True, 0.1, "")
        started = time.monotonic()
        while len(checkins) < 2:
            await asyncio.sleep(0.01)
        assert checkins[1] - started < 0.5  # the result posted, it checks in at once
        assert [r["round_index"] for r in results] == [1]
        # An assignment whose task never comes holds it for hold_s, then it checks in.
        while len(checkins) < 3:
            await asyncio.sleep(0.05)
        assert checkins[2] - checkins[1] >= 0.9
    finally:
        stop.set()
        await running
        await runner.cleanup()


# -- the strategy over a grid, with Venn down, silent, back -------------------------------


class ScriptedBridge:
    """A bridge on loopback that plays Venn's part: ``silent`` (takes every call, assigns
    nothing and has heard nothing from Venn), or ``up`` (assigns ``devices`` at once)."""

    def __init__(
        self,
        devices: list[str],
        plan: dict[int, list[str]] | None = None,
        after: dict[str, float] | None = None,
    ) -> None:
        self.devices = devices
        self.plan = plan or {}
        """Round attempt -> its devices (default: ``devices``)."""
        self.after = after or {}
        """Device -> seconds after the request before Venn assigns it (default: at once)."""
        self.requested_at: dict[int, float] = {}
        self.mode = "silent"
        self.requests: list[int] = []
        self.closed: list[tuple[int, str]] = []
        self.port = free_port()
        self._runner: web.AppRunner | None = None
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._started.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        job = "/v1/runs/{job_id}"
        app.router.add_put(job, self.register)
        app.router.add_post(job + "/rounds/{r}", self.request)
        app.router.add_get(job + "/rounds/{r}", self.assignments)
        app.router.add_post(job + "/rounds/{r}/close", self.close)
        for verb in ("alive", "finish", "cancel"):
            app.router.add_post(f"{job}/{verb}", self.ok)
        runner = self._runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._started.set()
        self._loop.run_forever()

    async def register(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"requirement": body["requirement"]})

    async def request(self, request: web.Request) -> web.Response:
        self.requests.append(int(request.match_info["r"]))
        self.requested_at[self.requests[-1]] = time.monotonic()
        return web.json_response({})

    async def assignments(self, request: web.Request) -> web.Response:
        if self.mode == "up":
            index = int(request.match_info["r"])
            since = time.monotonic() - self.requested_at.get(index, 0.0)
            devices = [
                d for d in self.plan.get(index, self.devices) if self.after.get(d, 0.0) <= since
            ]
            if len(devices) <= int(request.query.get("have", "0")):
                await asyncio.sleep(min(float(request.query["wait"]), 0.1))
            return web.json_response({"devices": devices, "heard_s": 0.1})
        await asyncio.sleep(min(float(request.query["wait"]), 0.1))
        return web.json_response({"devices": [], "heard_s": None})

    async def close(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.closed.append((int(request.match_info["r"]), body["outcome"]))
        return web.json_response({})

    async def ok(self, request: web.Request) -> web.Response:
        return web.json_response({})

    @property
    def bridge(self) -> Bridge:
        return Bridge(f"http://127.0.0.1:{self.port}", timeout_s=5)

    def stop(self) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


# Nodes 1-4 meet ram >= 8, nodes 5 and 6 do not.
POOL = {
    1: ("d1", {"ram": 8.0}, 0.0),
    2: ("d2", {"ram": 16.0}, 0.0),
    3: ("d3", {"ram": 8.0}, 0.0),
    4: ("d4", {"ram": 32.0}, 0.0),
    5: ("d5", {"ram": 4.0}, 0.0),
    6: ("d6", {"ram": 2.0}, 0.0),
}


def venn_strategy(bridge: Bridge, **options: Any) -> VennStrategy:
    inner = FedAvg(min_train_nodes=1, min_available_nodes=1, fraction_evaluate=0.0)
    defaults: dict[str, Any] = {
        "venn_wait_s": 0.3,
        "probe_s": 0.2,
        "poll_s": 0.01,
        "watch_s": 0.05,
    }
    return VennStrategy(
        inner, job(demand=2, min_nodes=1, wait_s=1.0), bridge=bridge, **{**defaults, **options}
    )


def run(strategy: VennStrategy, grid: MemoryGrid, rounds: int) -> ArrayRecord:
    result = strategy.start(grid, ArrayRecord([np.zeros(2)]), num_rounds=rounds, timeout=10)
    assert result.arrays is not None
    return result.arrays


def venn_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "venn_flower" and r.getMessage().startswith(text)
    ]


@pytest.fixture
def venn_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Venn's lines of the run's log, as caplog records (a handler of its own on the
    logger keeps `to_run_log` from sending them to stderr instead)."""
    logger = logging.getLogger("venn_flower")
    keep = logging.NullHandler()
    logger.addHandler(keep)
    caplog.set_level(logging.INFO, logger="venn_flower")
    yield caplog
    logger.removeHandler(keep)


def test_venn_down_from_the_start_the_run_samples_its_eligible_nodes(
    venn_log: pytest.LogCaptureFixture,
) -> None:
    grid = grid_of(POOL, numpy_app())
    strategy = venn_strategy(DOWN)
    arrays = run(strategy, grid, rounds=3)
    assert [a.tolist() for a in arrays.to_numpy_ndarrays()] == [[3.0, 3.0]]  # 3 rounds trained
    assert [r.source for r in strategy.records] == ["flower"] * 3
    trained = {m.metadata.dst_node_id for m in grid.pushed if m.metadata.message_type == "train"}
    assert trained and trained <= {1, 2, 3, 4}  # never a node without ram >= 8
    assert len(venn_lines(venn_log, "Venn unreachable")) == 1  # one line, not a flood


def test_venn_silent_then_back_the_run_samples_then_returns_to_venn(
    venn_log: pytest.LogCaptureFixture,
) -> None:
    grid = grid_of(POOL, numpy_app())
    scripted = ScriptedBridge(["d2@2", "d4@4"])
    try:
        strategy = venn_strategy(scripted.bridge)
        rounds: list[str] = []

        def on_round(record: Any) -> None:
            rounds.append(record.source)
            if len([s for s in rounds if s == "flower"]) == 2:
                scripted.mode = "up"  # Venn comes back after two rounds of its own

        strategy.on_round = on_round
        run(strategy, grid, rounds=4)
    finally:
        scripted.stop()
    sampled = [r for r in strategy.records if r.source == "flower"]
    from_venn = [r for r in strategy.records if r.source == "venn" and r.sent]
    assert len(sampled) == 2 and len(from_venn) == 2
    assert all(set(r.nodes.values()) == {2, 4} for r in from_venn)
    assert len(venn_lines(venn_log, "Venn unreachable")) == 1
    assert len(venn_lines(venn_log, "Venn is back")) == 1
    # Every attempt Venn was asked for was closed (the silent ones as failed).
    assert {i for i, _ in scripted.closed} == set(scripted.requests)


def test_venn_down_from_the_start_without_the_query_handler_fails_clearly() -> None:
    strategy = venn_strategy(DOWN, down_wait_s=0.5)
    with pytest.raises(VennDown, match=r"answer_venn_queries\(app\)"):
        run(strategy, grid_of(POOL, numpy_app(queries=False)), rounds=1)


def test_venn_down_and_told_to_wait_the_run_fails_clearly_after_its_bound() -> None:
    strategy = venn_strategy(DOWN, on_venn_down="wait", down_wait_s=0.5)
    with pytest.raises(VennDown, match="Venn unreachable for"):
        run(strategy, grid_of(POOL, numpy_app()), rounds=1)


class LeavingGrid(MemoryGrid):
    """Node 2 leaves the grid the moment its first message reaches it."""

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = list(super().push_messages(messages))
        if any(m.metadata.dst_node_id == 2 for m in self.pushed):
            self.nodes.pop(2, None)
        return ids


def test_a_node_that_leaves_mid_round_is_replaced_within_the_round() -> None:
    spec = dict(POOL)
    spec[2] = ("d2", {"ram": 16.0}, float("inf"))  # never answers: it left
    grid = LeavingGrid({n: MemoryNode(*v[:2], numpy_app(), v[2]) for n, v in spec.items()})
    scripted = ScriptedBridge(["d1@1", "d2@2"], plan={1: ["d3@3"]})
    scripted.mode = "up"
    try:
        strategy = venn_strategy(scripted.bridge, close_at=1.0)
        run(strategy, grid, rounds=1)
    finally:
        scripted.stop()
    (record,) = strategy.records
    assert record.outcome == "succeeded"
    assert record.replied == ["d1@1", "d3@3"]  # d3 did d2's work, in the same round
    assert scripted.requests == [0, 1]
    # One success per round (Venn counts it as a round done): the replacement attempt's
    # close says failed, and whose results it carried.
    assert sorted(scripted.closed) == [(0, "succeeded"), (1, "failed")]


def test_a_round_starts_with_its_first_nodes_and_takes_the_others_as_venn_assigns_them() -> None:
    grid = grid_of(POOL, numpy_app())
    scripted = ScriptedBridge(["d1@1", "d2@2", "d3@3"], after={"d2@2": 0.6, "d3@3": 1.2})
    scripted.mode = "up"
    try:
        inner = FedAvg(min_train_nodes=1, min_available_nodes=1, fraction_evaluate=0.0)
        strategy = VennStrategy(
            inner,
            job(demand=3, min_nodes=1, wait_s=5.0),
            bridge=scripted.bridge,
            close_at=1.0,
            poll_s=0.01,
        )
        run(strategy, grid, rounds=1)
    finally:
        scripted.stop()
    (record,) = strategy.records
    # d1 got its work before d2 and d3 were even assigned, and they joined the same round.
    assert [m.metadata.dst_node_id for m in grid.pushed] == [1, 2, 3]
    assert record.replied == ["d1@1", "d2@2", "d3@3"] and record.outcome == "succeeded"


def test_a_clientapp_without_venn_mod_gets_a_clear_error() -> None:
    scripted = ScriptedBridge(["d1@1", "d2@2"])
    scripted.mode = "up"
    try:
        strategy = venn_strategy(scripted.bridge)
        with pytest.raises(RuntimeError, match=r"ClientApp\(mods=\[venn_mod\]\)"):
            run(strategy, grid_of(POOL, numpy_app(with_mod=False)), rounds=1)
    finally:
        scripted.stop()


# -- the test bed and its reports -------------------------------------------------------------


def test_the_example_apps_refuse_a_node_that_lacks_the_requirement() -> None:
    config = parse_node_config("device-id='d1' attr.cpu_f=2 attr.ram=2")
    assert check_eligible(config, "cpu_f=2").device_id == "d1"
    with pytest.raises(Ineligible):
        check_eligible(config, "cpu_f=2,ram=8")
    assert str(parse_requirement("ram=8, cpu_f=6")) == "cpu_f>=6,ram>=8"
    with pytest.raises(ValueError):
        parse_requirement("ram")


def report(name: str, tasks: list[Task], rounds: list[VennRound] | None = None) -> RunReport:
    return RunReport(name, "venn", f"job-{name}", 0.0, 10.0, [0.5], tasks, 0, rounds or [])


def test_reports_show_where_a_node_served_two_runs_at_once() -> None:
    # d1: b's message reached d1 while it worked for a, and waited (Flower's SuperNode
    # takes one message at a time): a shared node although the work never overlapped.
    a = report("a", [Task("d1", 1, "train", 0.0, 0.0, 2.0), Task("d2", 1, "train", 0, 0, 2)])
    b = report("b", [Task("d1", 1, "train", 1.5, 2.0, 3.0), Task("d2", 1, "train", 2, 2, 3)])
    found = overlaps([a, b])
    assert [(o.device, o.runs) for o in found] == [("d1", ("a", "b"))]
    assert found[0].seconds == pytest.approx(0.5)
    assert tasks_overlapping([a, b]) == 2
    # Two tasks of one run on one node (train, then evaluate) are no overlap.
    same_run = [Task("d1", 1, "train", 0, 0, 2), Task("d1", 1, "evaluate", 1, 1, 3)]
    assert overlaps([report("c", same_run)]) == []


def test_a_task_of_a_node_that_joined_a_round_late_was_sent_when_it_joined() -> None:
    joined = VennRound(
        "train", 1, 0, ["d1", "d2"], ["d1", "d2"], "succeeded", 0.0, 1.0, 9.0,
        dispatched={"d1": 1.0, "d2": 5.0},
    )  # fmt: skip
    tasks = [Task("d1", 1, "train", 1.0, 2.0, 4.0), Task("d2", 1, "train", 1.0, 6.0, 8.0)]
    fixed = dispatch_times(report("a", tasks, [joined]))
    assert [t.sent for t in fixed] == [1.0, 5.0]
    # d2 worked for run b until 4.5 and got a's message at 5.0: no node shared.
    b = report("b", [Task("d2", 1, "train", 0.0, 0.5, 4.5)])
    assert overlaps([report("a", fixed, [joined]), b]) == []


def test_reports_show_work_venn_had_not_assigned() -> None:
    rounds = [VennRound("train", 1, 0, ["d1", "d2"], ["d1"], "succeeded", 0.0, 1.0, 2.0)]
    good = report("a", [Task("d1", 1, "train", 1, 1, 2)], rounds)
    assert unassigned_work(good) == []
    tasks = [Task("d3", 1, "train", 1, 1, 2), Task("d1", 2, "train", 3, 3, 4)]
    stray = report("a", tasks, rounds)
    assert unassigned_work(stray) == [(1, "d3"), (2, "d1")]
