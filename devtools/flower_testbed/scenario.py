"""The Flower scenarios of the demo and the benchmark, under one of three arms:

- the demo's (`NODES`, `RUNS`): eight SuperNodes with different attributes and speeds,
  three runs with overlapping requirements started at once, tasks of a few seconds;
- the benchmark's contended one (`CONTENDED_NODES`, `CONTENDED_RUNS`): sixteen SuperNodes,
  four runs with overlapping requirements started 15 s apart, more demand than nodes, tasks
  of 10-60 s (scaled by ``work_scale``).

Arms:

- ``flower``: Flower alone; each run samples its nodes at random from every node (a node
  may serve several runs at once, and an ineligible pick fails its task);
- ``venn``: a private Venn stack (`venn up` on free ports, its own run dir) with the
  ``venn`` policy chooses every round's nodes;
- ``random``: the same stack with Venn's ``random`` policy.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devtools.flower_testbed.cluster import EXAMPLE_APPS, FlowerTestbed, NodeSpec
from devtools.flower_testbed.report import RunReport
from venn.auth import Tokens
from venn.net import free_port
from venn.settings import Settings

ARMS = ("flower", "venn", "random")

NODES = [
    NodeSpec("d1", {"cpu_f": 2, "ram": 2}, speed_ms=8.0, seed=1),
    NodeSpec("d2", {"cpu_f": 2, "ram": 4}, speed_ms=8.0, seed=2),
    NodeSpec("d3", {"cpu_f": 4, "ram": 4}, speed_ms=5.0, seed=3),
    NodeSpec("d4", {"cpu_f": 4, "ram": 8}, speed_ms=5.0, seed=4),
    NodeSpec("d5", {"cpu_f": 6, "ram": 8}, speed_ms=3.0, seed=5),
    NodeSpec("d6", {"cpu_f": 6, "ram": 16}, speed_ms=3.0, seed=6),
    NodeSpec("d7", {"cpu_f": 8, "ram": 16}, speed_ms=2.0, seed=7),
    NodeSpec("d8", {"cpu_f": 8, "ram": 16}, speed_ms=2.0, seed=8),
]


@dataclass(frozen=True)
class RunSpec:
    name: str
    app: str
    requirement: str
    demand: int
    rounds: int
    config: dict[str, object] = field(default_factory=dict)
    start_s: float = 0.0
    """When it is submitted, after the first run."""

    def run_config(self, scheduler: str) -> dict[str, object]:
        return {
            "scheduler": scheduler,
            "requirement": self.requirement,
            "demand": self.demand,
            "num-rounds": self.rounds,
            **self.config,
        }


RUNS = [
    # Any node; the scarce fast nodes are better left to the others.
    RunSpec("logreg-any", "logreg", "cpu_f=2", demand=3, rounds=5),
    # Needs ram >= 8: d4-d8.
    RunSpec("mlp-ram8", "mlp", "ram=8", demand=3, rounds=5),
    # Needs cpu_f >= 6: d5-d8 only.
    RunSpec("logreg-cpu6", "logreg", "cpu_f=6", demand=2, rounds=5, config={"task-seed": 3}),
]


# Sixteen nodes: faster nodes tend to have more CPU; RAM is spread across every CPU class.
# ms per example: a logreg task is 1,000 examples (10-30 s), an MLP task 2,000 (16-60 s).
_CONTENDED = [
    # cpu_f, ram, ms per example
    (2, 2, 30.0),
    (2, 4, 30.0),
    (2, 8, 26.0),
    (2, 16, 26.0),
    (4, 2, 20.0),
    (4, 4, 20.0),
    (4, 8, 18.0),
    (4, 16, 18.0),
    (6, 4, 14.0),
    (6, 8, 14.0),
    (6, 16, 12.0),
    (6, 16, 12.0),
    (8, 8, 10.0),
    (8, 16, 10.0),
    (8, 16, 8.0),
    (8, 4, 8.0),
]
CONTENDED_NODES = [
    NodeSpec(f"n{i:02d}", {"cpu_f": cpu, "ram": ram}, speed_ms=ms, seed=i)
    for i, (cpu, ram, ms) in enumerate(_CONTENDED, start=1)
]
CONTENDED_RUNS = [
    # All 16 nodes qualify.
    RunSpec("logreg-any", "logreg", "cpu_f=2", demand=5, rounds=5),
    # ram >= 8: 10 nodes.
    RunSpec("mlp-ram8", "mlp", "ram=8", demand=5, rounds=5, start_s=15.0),
    # cpu_f >= 6: 8 nodes.
    RunSpec(
        "logreg-cpu6",
        "logreg",
        "cpu_f=6",
        demand=5,
        rounds=5,
        config={"task-seed": 3},
        start_s=30.0,
    ),
    # cpu_f >= 6 and ram >= 8: 6 nodes, all wanted by the two runs before.
    RunSpec(
        "mlp-cpu6-ram8",
        "mlp",
        "cpu_f=6,ram=8",
        demand=3,
        rounds=5,
        config={"task-seed": 5},
        start_s=45.0,
    ),
]
SCENARIOS = {"demo": (NODES, RUNS), "contended": (CONTENDED_NODES, CONTENDED_RUNS)}


@dataclass
class ArmResult:
    arm: str
    reports: list[RunReport]
    wall_s: float
    startup_s: float

    @property
    def avg_completion_s(self) -> float:
        return sum(r.completion_s for r in self.reports) / len(self.reports)


def _stack_settings(run_dir: Path) -> Settings:
    """`venn up` settings for a private stack: its own run dir, free ports, and an answer
    to every check-in without work within a second (nodes check in every second)."""
    settings = Settings.from_env({"VENN_RUN_DIR": str(run_dir)})
    return dataclasses.replace(
        settings.with_gateway(port=free_port(), retry_after_s=1).with_scheduler(
            web_port=free_port()
        ),
        broker=f"127.0.0.1:{free_port()}",
        recorder_port=free_port(),
        database_url="",
    )


def run_arm(
    arm: str,
    root: Path,
    runs: Sequence[RunSpec] = RUNS,
    nodes: Sequence[NodeSpec] = NODES,
    timeout_s: float = 1800.0,
    say: Callable[[str], None] = print,
    work_scale: float = 1.0,
    secure: bool = False,
    config: dict[str, object] | None = None,
) -> ArmResult:
    """Start what the arm needs, submit every run at its start, wait for their reports.
    ``work_scale`` multiplies every node's emulated compute time; ``secure``: TLS to the
    SuperLink and node authentication; ``config``: run config for every run."""
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r}: one of {', '.join(ARMS)}")
    nodes = [dataclasses.replace(n, speed_ms=n.speed_ms * work_scale) for n in nodes]
    from devtools.stack.local import down, up

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.monotonic()
    settings: Settings | None = None
    gateway: str | None = None
    enroll_token: str | None = None
    bridge_env: dict[str, str] | None = None
    try:
        if arm != "flower":
            settings = _stack_settings(root / "venn")
            say(f"[{arm}] starting a private Venn stack in {settings.run_dir} ...")
            info = up(settings, policy=arm)
            secret = Settings.from_env({"VENN_RUN_DIR": str(info.run_dir)}).auth_secret
            say(f"[{arm}] Venn: {info.broker_description}, gateway :{settings.gateway.port}")
            gateway = f"http://127.0.0.1:{settings.gateway.port}"
            enroll_token = Tokens(secret).issue("enroll", "flower-demo", ttl_s=86400)
            # The bridge finds the stack (broker, coordinator credentials, the secret that
            # mints the runs' job tokens) in its run dir; the ServerApps only the bridge.
            bridge_env = {"VENN_RUN_DIR": str(info.run_dir)}
        bed = FlowerTestbed(
            root / "flower",
            list(nodes),
            gateway=gateway,
            enroll_token=enroll_token,
            bridge_env=bridge_env,
            secure=secure,
        )
        mode = "secure" if secure else "insecure"
        say(f"[{arm}] starting a SuperLink and {len(nodes)} SuperNodes ({mode}) ...")
        with bed:
            startup = time.monotonic() - started
            scheduler = "flower" if arm == "flower" else "venn"
            say(f"[{arm}] submitting {len(runs)} runs")
            first = time.monotonic()
            submitted = []
            for r in sorted(runs, key=lambda r: r.start_s):
                time.sleep(max(0.0, first + r.start_s - time.monotonic()))  # the schedule
                run_config = {**r.run_config(scheduler), **(config or {})}
                submitted.append(bed.submit(EXAMPLE_APPS / r.app, r.name, run_config))
            reports = bed.wait(submitted, timeout_s)
        return ArmResult(arm, reports, time.monotonic() - started, startup)
    finally:
        if settings is not None:
            down(settings)
