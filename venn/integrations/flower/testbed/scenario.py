"""The Flower scenario of the demo and the benchmark: eight SuperNodes with different
attributes and speeds, three runs with overlapping requirements started at once, under one
of three arms:

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

from venn.auth import Tokens
from venn.broker.process import free_port
from venn.integrations.flower.testbed.cluster import EXAMPLE_APPS, FlowerTestbed, NodeSpec
from venn.integrations.flower.testbed.report import RunReport
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
) -> ArmResult:
    """Start what the arm needs, submit every run at once, wait for their reports.
    ``work_scale`` multiplies every node's emulated compute time."""
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r}: one of {', '.join(ARMS)}")
    nodes = [dataclasses.replace(n, speed_ms=n.speed_ms * work_scale) for n in nodes]
    from venn.stack.local import down, up

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.monotonic()
    settings: Settings | None = None
    gateway: str | None = None
    enroll_token: str | None = None
    server_env: dict[str, str] = {}
    try:
        if arm != "flower":
            settings = _stack_settings(root / "venn")
            say(f"[{arm}] starting a private Venn stack in {settings.run_dir} ...")
            info = up(settings, policy=arm)
            secret = Settings.from_env({"VENN_RUN_DIR": str(info.run_dir)}).auth_secret
            say(f"[{arm}] Venn: {info.broker_description}, gateway :{settings.gateway.port}")
            gateway = f"http://127.0.0.1:{settings.gateway.port}"
            enroll_token = Tokens(secret).issue("enroll", "flower-demo", ttl_s=86400)
            # ServerApps find the stack (broker, coordinator credentials, the secret that
            # mints their job tokens) in its run dir, as the SDK example does.
            server_env = {"VENN_RUN_DIR": str(info.run_dir)}
        bed = FlowerTestbed(
            root / "flower",
            list(nodes),
            gateway=gateway,
            enroll_token=enroll_token,
            server_env=server_env,
        )
        say(f"[{arm}] starting a SuperLink and {len(nodes)} SuperNodes ...")
        with bed:
            startup = time.monotonic() - started
            scheduler = "flower" if arm == "flower" else "venn"
            say(f"[{arm}] submitting {len(runs)} runs at once")
            submitted = [
                bed.submit(EXAMPLE_APPS / r.app, r.name, r.run_config(scheduler)) for r in runs
            ]
            reports = bed.wait(submitted, timeout_s)
        return ArmResult(arm, reports, time.monotonic() - started, startup)
    finally:
        if settings is not None:
            down(settings)
