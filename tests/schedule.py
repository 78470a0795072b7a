"""How the suite's modules are spread over the xdist workers (`make test`: `-n 3 --dist
loadfile`): only the order and the placement depend on it, never a result.

1. Whole modules, the longest known first (`LONGEST`), then own-broker and e2e, broker and
   database, pure: the long modules start first and the short pure ones fill the tail.
2. `FeedShortBehindLong`: xdist hands a worker its next module while it still has two
   tests to run, and a worker cannot start its last test before it knows the next one, so
   a module handed to a worker busy with a long test waits behind it while another worker
   may be idle (CI of 0a04b4d: test_flower, 191 s of setup, waited behind schemathesis).
   A worker whose remaining tests are of a `LONGEST` module gets the queue's last module
   (a short pure one) instead, and the long modules go to workers about to be free.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

LONGEST = (
    "tests/e2e/test_compose.py",  # the engine check: 452 s on a clean clone (compose-engine.md)
    "tests/e2e/test_faults.py",
    "tests/e2e/test_dashboard.py",
    # Not among the first three: beside the compose engine's image builds and schemathesis
    # (load 16-22) its plain bed's ServerApps started more than 30 s after their runs were
    # claimed, past the task token Flower gives them (flwr's HEARTBEAT_DEFAULT_INTERVAL), and
    # every call after was refused (clean-clone runs of cb737a3 and b895698: 5 errors each).
    "tests/e2e/test_flower.py",
    "tests/broker/test_gateway.py",
    "tests/e2e/test_pipeline.py",
    "tests/pure/test_venn_lowest.py",
    "tests/e2e/test_flower_nodes.py",  # not beside test_flower: both start a dozen processes
    "tests/e2e/test_stack.py",
    "tests/e2e/test_ledger_chaos.py",
    "tests/e2e/test_flower_package.py",
    "tests/e2e/test_workers.py",
    "tests/e2e/test_report_demo.py",
    "tests/broker/test_failover.py",
    "tests/broker/test_kafka.py",
    "tests/broker/test_job_api.py",
    "tests/e2e/test_loadtest.py",
    "tests/e2e/test_outage.py",
    "tests/pure/test_incremental_plan.py",
)
"""The modules that took longest in CI, longest first (`--durations` of the CI run of 7e3d220,
setup and calls summed): they start first."""

OWN_BROKER = "own_broker"
"""The marker of a module whose stacks start brokers of their own."""


def _weight(item: pytest.Item, root: Path) -> tuple[int, int]:
    where = item.path.relative_to(root).as_posix()
    if where in LONGEST:
        return 0, LONGEST.index(where)
    if item.get_closest_marker(OWN_BROKER) or item.get_closest_marker("e2e"):
        return 1, 0
    if any(item.get_closest_marker(m) for m in ("broker", "database", "tansu")):
        return 2, 0
    return 3, 0


def longest_modules_first(items: list[pytest.Item], root: Path) -> None:
    """Sort whole modules by weight (collection order within each)."""
    weight: dict[Path, tuple[int, int]] = {}
    for item in items:
        weight[item.path] = min(weight.get(item.path, (3, 0)), _weight(item, root))
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (weight[item.path], order[id(item)]))


class FeedShortBehindLong(LoadFileScheduling):
    """`--dist loadfile` that queues a short module, not a long one, behind a long module's
    remaining tests."""

    def _assign_work_unit(self, node: WorkerController) -> None:
        remaining = [
            module
            for module, tests in self.assigned_work.get(node, {}).items()
            if not all(tests.values())
        ]
        if len(self.workqueue) > 1 and any(module in LONGEST for module in remaining):
            self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
        super()._assign_work_unit(node)
