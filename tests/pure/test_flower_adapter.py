"""The Flower adapter's pure parts: node profiles from node configs, the messages' Venn
tags, the node directory over an in-memory grid, the strategy's guards, the run reports'
checks. (The whole path, with real flwr processes and Kafka: tests/e2e/test_flower.py.)"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.config import parse_config_args
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from venn.integrations.flower.directory import NodeDirectory
from venn.integrations.flower.grid import AssignedGrid
from venn.integrations.flower.profile import NodeConfigError, NodeProfile
from venn.integrations.flower.protocol import (
    QUERY_TYPE,
    RoundTag,
    device_answer,
    device_of,
    tag,
    tag_of,
)
from venn.integrations.flower.session import VennJob, VennSession
from venn.integrations.flower.strategy import VennStrategy
from venn.integrations.flower.testbed.node import Ineligible, check_eligible, parse_requirement
from venn.integrations.flower.testbed.report import (
    RunReport,
    Task,
    VennRound,
    overlaps,
    tasks_overlapping,
    unassigned_work,
)
from venn.sdk import VennClient


@pytest.fixture(autouse=True)
def flower_run() -> Iterator[None]:
    """Flower builds messages only inside a run (a ServerApp or ClientApp process)."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 7, 1, 1
    yield
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None  # type: ignore[assignment]


class MemoryGrid(Grid):
    """Online nodes that answer ``query.venn`` with their device id (None: a node whose
    ClientApp has no Venn handler)."""

    def __init__(self, devices: dict[int, str | None]) -> None:
        self.devices = devices
        self.sent: list[Message] = []

    def set_run(self, run: Run) -> None:
        raise NotImplementedError

    @property
    def run(self) -> Run:
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
        return list(self.devices)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        raise NotImplementedError

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        raise NotImplementedError

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        replies = []
        for m in messages:
            self.sent.append(m)
            device = self.devices.get(m.metadata.dst_node_id)
            if m.metadata.message_type == QUERY_TYPE and device is not None:
                replies.append(device_answer(m, device))
        return replies


def profile(text: str) -> NodeProfile:
    return NodeProfile.from_node_config(parse_config_args([text]))


def test_a_node_config_gives_the_devices_id_attributes_and_speed() -> None:
    p = profile("device-id='d3' attr.cpu_f=4 attr.ram=8.5 speed-ms=2.5 seed=3")
    assert p == NodeProfile("d3", {"cpu_f": 4.0, "ram": 8.5}, 2.5)
    assert p.checkin_body()["attrs"] == {"cpu_f": 4.0, "ram": 8.5}
    assert profile("device-id='x'").attrs == {}


@pytest.mark.parametrize(
    "text",
    ["attr.ram=8", "device-id=3", "device-id='d' attr.ram='big'", "device-id='d' speed-ms=true"],
)
def test_a_node_config_that_is_no_device_is_refused_clearly(text: str) -> None:
    with pytest.raises(NodeConfigError):
        profile(text)


def test_a_message_carries_its_venn_round_and_a_query_its_device() -> None:
    content = RecordDict({"config": ConfigRecord({"lr": 0.1})})
    msg = Message(content, message_type="train", dst_node_id=5)
    assert tag_of(msg) is None
    tag(msg, RoundTag("job-a", 3))
    assert tag_of(msg) == RoundTag("job-a", 3)
    query = Message(RecordDict(), message_type=QUERY_TYPE, dst_node_id=5)
    assert device_of(device_answer(query, "d5")) == "d5"


def test_the_directory_asks_unknown_nodes_once_and_leaves_out_silent_ones() -> None:
    grid = MemoryGrid({11: "d1", 12: "d2", 13: None})
    directory = NodeDirectory()
    assert directory.nodes(grid, ["d2", "d1"]) == {"d2": 12, "d1": 11}
    assert len(grid.sent) == 3
    assert directory.unanswered == {13}
    assert directory.nodes(grid, ["d1"]) == {"d1": 11}
    assert len(grid.sent) == 3  # known: not asked again
    # An assigned device no node claims makes it ask the unknown ones again.
    assert directory.nodes(grid, ["d9"]) == {}
    assert len(grid.sent) == 4
    # A restarted SuperNode (new node id) replaces the device's old entry.
    directory.learn(21, "d1")
    assert directory.node_of["d1"] == 21 and 11 not in directory.device_of


def test_a_wrapped_strategy_sees_only_the_nodes_venn_assigned() -> None:
    grid = MemoryGrid({1: "d1", 2: "d2", 3: "d3", 4: "d4"})
    inner = FedAvg(fraction_train=1.0, min_train_nodes=1, min_available_nodes=1)
    messages = inner.configure_train(1, ArrayRecord(), ConfigRecord(), AssignedGrid(grid, [2, 4]))
    assert sorted(m.metadata.dst_node_id for m in messages) == [2, 4]


def test_a_strategy_that_waits_for_more_nodes_than_a_round_may_have_is_refused() -> None:
    job = VennJob("j", {"ram": 8}, demand=3, min_nodes=2)
    session = VennSession(VennClient("127.0.0.1:1"), job)
    with pytest.raises(ValueError, match="waits for 3 nodes"):
        VennStrategy(FedAvg(min_available_nodes=3), session)
    # No federated evaluation in the job: FedAvg's min_evaluate_nodes never applies.
    VennStrategy(FedAvg(min_available_nodes=2, min_train_nodes=2, min_evaluate_nodes=5), session)
    evaluating = VennSession(session.client, VennJob("j", {}, 3, min_nodes=2, evaluate_demand=2))
    with pytest.raises(ValueError, match="waits for 5 nodes"):
        VennStrategy(FedAvg(min_available_nodes=2, min_evaluate_nodes=5), evaluating)


def test_a_job_counts_a_venn_round_per_phase_that_needs_nodes() -> None:
    assert VennJob("j", {}, demand=2).rounds(5) == 5
    assert VennJob("j", {}, demand=2, evaluate_demand=1).rounds(5) == 10
    with pytest.raises(ValueError):
        VennJob("j", {}, demand=2, min_nodes=3)


def test_the_example_apps_refuse_a_node_that_lacks_the_requirement() -> None:
    config = parse_config_args(["device-id='d1' attr.cpu_f=2 attr.ram=2"])
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


def test_reports_show_work_venn_had_not_assigned() -> None:
    rounds = [VennRound("train", 1, 0, ["d1", "d2"], ["d1"], "succeeded", 0.0, 1.0, 2.0)]
    good = report("a", [Task("d1", 1, "train", 1, 1, 2)], rounds)
    assert unassigned_work(good) == []
    tasks = [Task("d3", 1, "train", 1, 1, 2), Task("d1", 2, "train", 3, 3, 4)]
    stray = report("a", tasks, rounds)
    assert unassigned_work(stray) == [(1, "d3"), (2, "d1")]
