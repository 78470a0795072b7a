"""The ServerApp side of the example apps' experiment: FedAvg over the nodes Venn assigns
(run config ``scheduler = "venn"``) or over nodes Flower samples at random from every node
(``"flower"``), centralized accuracy on a held-out set after every round, and a
`RunReport` in ``report-dir`` at the end.

Run config keys (each app's pyproject.toml gives defaults): num-rounds, demand, min-nodes,
evaluate-demand, requirement ("cpu_f=4,ram=8"), scheduler, samples, local-epochs, lr,
task-seed, wait-s, close-at, venn-wait-s, on-venn-down, round-timeout, run-name,
report-dir.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Strategy
from venn_flower.profile import device_name
from venn_flower.strategy import VennStrategy, job_id_for

from devtools.flower_testbed.data import sample
from devtools.flower_testbed.model import TASK_RECORD, Model
from devtools.flower_testbed.model import config_int as _int
from devtools.flower_testbed.node import parse_requirement
from devtools.flower_testbed.report import RunReport, Task, VennRound

TEST_EXAMPLES = 2000


class RecordingFedAvg(FedAvg):
    """FedAvg that keeps every reply's task timing for the run's report."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tasks: list[Task] = []
        self.failed_replies = 0
        self.sent: dict[tuple[str, int], float] = {}
        """(phase, server round) -> when its messages were built (and then sent)."""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        messages = super().configure_train(server_round, arrays, config, grid)
        self.sent["train", server_round] = time.time()
        return messages

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        messages = super().configure_evaluate(server_round, arrays, config, grid)
        self.sent["evaluate", server_round] = time.time()
        return messages

    def _record(self, server_round: int, phase: str, replies: list[Message]) -> None:
        for reply in replies:
            if reply.has_error():
                self.failed_replies += 1
                continue
            task = reply.content.config_records.get(TASK_RECORD)
            if task is not None:
                start = float(task["start"])  # type: ignore[arg-type]
                self.tasks.append(
                    Task(
                        str(task["device-id"]),
                        server_round,
                        phase,
                        self.sent.get((phase, server_round), start),
                        start,
                        float(task["end"]),  # type: ignore[arg-type]
                    )
                )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        self._record(server_round, "train", replies)
        return super().aggregate_train(server_round, [r for r in replies if not r.has_error()])

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        replies = list(replies)
        self._record(server_round, "evaluate", replies)
        return super().aggregate_evaluate(server_round, [r for r in replies if not r.has_error()])


def dispatch_times(report: RunReport) -> list[Task]:
    """The tasks, each with the time its own message was sent (a node that joined a Venn
    round after it started got its message then, not when the round's first ones went)."""
    sent: dict[tuple[str, int, str], float] = {}
    for r in report.venn_rounds:
        for device, at in r.dispatched.items():
            sent[r.phase, r.server_round, device] = at
    return [
        dataclasses.replace(t, sent=sent.get((t.phase, t.server_round, t.device), t.sent))
        for t in report.tasks
    ]


def serve(grid: Grid, context: Context, model: Model) -> RunReport:
    """The ServerApp's main: train, evaluate after every round, write the report."""
    cfg = dict(context.run_config)
    scheduler, demand = str(cfg["scheduler"]), _int(cfg, "demand")
    evaluate_demand = _int(cfg, "evaluate-demand")
    task_seed = _int(cfg, "task-seed")
    x_test, y_test = sample(
        model.teacher(task_seed), model.dim, TEST_EXAMPLES, np.random.default_rng(task_seed + 1)
    )
    accuracy: list[float] = []

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        accuracy.append(model.accuracy(arrays.to_numpy_ndarrays(), x_test, y_test))
        return MetricRecord({"accuracy": accuracy[-1]})

    job_id = job_id_for(context.run_id, cfg)
    venn: VennStrategy | None = None
    if scheduler == "venn":
        recording = RecordingFedAvg(
            fraction_train=1.0,
            fraction_evaluate=1.0 if evaluate_demand else 0.0,
            min_train_nodes=1,
            min_evaluate_nodes=1,
            min_available_nodes=1,
        )
        venn = VennStrategy.for_run(
            recording,
            context,
            parse_requirement(str(cfg["requirement"])).as_dict(),
            demand,
            job={
                "min_nodes": _int(cfg, "min-nodes"),
                "evaluate_demand": evaluate_demand,
                "wait_s": float(cfg["wait-s"]),
            },
            close_at=float(cfg["close-at"]),
            venn_wait_s=float(cfg["venn-wait-s"]),
            on_venn_down="wait" if cfg["on-venn-down"] == "wait" else "sample",
        )
        strategy: Strategy = venn
    elif scheduler == "flower":
        # Flower's own sampling: `demand` nodes at random among every online node.
        strategy = recording = RecordingFedAvg(
            fraction_train=1e-9,
            fraction_evaluate=1e-9 if evaluate_demand else 0.0,
            min_train_nodes=demand,
            min_evaluate_nodes=max(evaluate_demand, 1),
            min_available_nodes=demand,
        )
    else:
        raise ValueError(f"run config scheduler={scheduler!r}: 'venn' or 'flower'")
    started = time.time()
    strategy.start(
        grid,
        ArrayRecord(model.init(task_seed)),
        num_rounds=_int(cfg, "num-rounds"),
        timeout=float(cfg["round-timeout"]),
        evaluate_fn=evaluate_fn,
    )
    report = RunReport(
        name=str(cfg["run-name"]) or job_id,
        scheduler=scheduler,
        job_id=job_id,
        started=started,
        finished=time.time(),
        accuracy=accuracy,
        tasks=recording.tasks,
        failed_replies=recording.failed_replies,
        venn_rounds=[
            VennRound(
                r.phase,
                r.server_round,
                r.round_index,
                [device_name(d) for d in r.assigned],
                [device_name(d) for d in r.replied],
                r.outcome,
                r.opened_at,
                r.started_at,
                r.closed_at,
                r.source,
                r.close_s,
                sorted(r.extra),
                {device_name(d): t for d, t in r.dispatched.items()},
            )
            for r in (venn.records if venn is not None else [])
        ],
    )
    report.tasks = dispatch_times(report)
    if cfg.get("report-dir"):
        out = Path(str(cfg["report-dir"]))
        out.mkdir(parents=True, exist_ok=True)
        report.write(out / f"{report.name}.json")
    return report
