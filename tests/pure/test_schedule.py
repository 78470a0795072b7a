"""The suite's xdist scheduler (tests/schedule.py) queues a short module behind a long
module's last tests, and a long one behind a short module's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from xdist.workermanage import WorkerController

from tests.schedule import LONGEST, FeedShortBehindLong

LONG_A, LONG_B, LONG_C = LONGEST[:3]
MODULES = {
    LONG_A: 3,
    LONG_B: 1,
    LONG_C: 4,
    "tests/e2e/test_short_e2e.py": 3,
    "tests/pure/test_first_pure.py": 3,
    "tests/pure/test_last_pure.py": 3,
}
"""Module -> its test count, in the order `longest_modules_first` gives."""


class Node:
    """What the scheduler uses of a worker: the tests it was sent."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduler(*nodes: Node) -> FeedShortBehindLong:
    config = SimpleNamespace(
        getvalue=lambda name: {"tx": [f"{len(nodes)}*popen"]}[name],
        option=SimpleNamespace(loadscopereorder=False),
    )
    sched = FeedShortBehindLong(cast(pytest.Config, config))
    collection = [f"{module}::test_{i}" for module, n in MODULES.items() for i in range(n)]
    for node in nodes:
        sched.add_node(cast(WorkerController, node))
        sched.add_node_collection(cast(WorkerController, node), collection)
    sched.schedule()
    return sched


def modules(sched: FeedShortBehindLong, node: Node) -> list[str]:
    assert sched.collection is not None
    return [sched.collection[i].split("::")[0] for i in node.sent]


def test_a_worker_left_with_a_long_modules_tests_gets_the_last_module_queued() -> None:
    one, two = Node("gw0"), Node("gw1")
    sched = scheduler(one, two)
    # LONG_B has one test: gw1 would wait in it with LONG_C queued behind; it gets the
    # queue's last (short) module instead.
    assert list(dict.fromkeys(modules(sched, one))) == [LONG_A]
    assert list(dict.fromkeys(modules(sched, two))) == [LONG_B, "tests/pure/test_last_pure.py"]
    # gw0 finishes a test of LONG_A and has two left: again the last queued module.
    sched.mark_test_complete(cast(WorkerController, one), one.sent[0])
    assert list(dict.fromkeys(modules(sched, one)))[1:] == ["tests/pure/test_first_pure.py"]


def test_a_worker_left_with_a_short_modules_tests_gets_the_longest_queued() -> None:
    one, two = Node("gw0"), Node("gw1")
    sched = scheduler(one, two)
    # gw1 runs LONG_B's test and one of the short module's: two short tests left.
    sched.mark_test_complete(cast(WorkerController, two), two.sent[0])
    sched.mark_test_complete(cast(WorkerController, two), two.sent[1])
    assert list(dict.fromkeys(modules(sched, two)))[-1] == LONG_C
