"""The ClientApp side of the example apps' experiment: the node makes its data from its
seed, trains or evaluates, spends its emulated device time, and returns the task's timing
with the result. Light imports: every task is a new process."""

from __future__ import annotations

import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from devtools.flower_testbed.data import node_split
from devtools.flower_testbed.model import TASK_RECORD, Model
from devtools.flower_testbed.model import config_int as _int
from devtools.flower_testbed.node import check_eligible, device_time


def _node_data(context: Context, model: Model) -> tuple[np.ndarray, np.ndarray, int]:
    cfg = context.run_config
    seed = int(context.node_config.get("seed", 0))  # type: ignore[arg-type]
    task_seed = _int(dict(cfg), "task-seed")
    x, y = node_split(
        model.teacher(task_seed),
        model.dim,
        model.classes,
        _int(dict(cfg), "samples"),
        seed=seed * 1_000_003 + task_seed,
    )
    return x, y, seed


def _task(context: Context, start: float) -> ConfigRecord:
    device = check_eligible(context.node_config, "").device_id
    return ConfigRecord({"device-id": device, "start": start, "end": time.time()})


def train(message: Message, context: Context, model: Model) -> Message:
    """The ClientApp's train handler (refuses, as an error, a node that lacks the run's
    requirement: only Flower's own sampling ever sends it one)."""
    start = time.time()
    cfg = dict(context.run_config)
    check_eligible(context.node_config, str(cfg["requirement"]))
    x, y, seed = _node_data(context, model)
    params = message.content.array_records["arrays"].to_numpy_ndarrays()
    epochs = _int(cfg, "local-epochs")
    server_round = message.content.config_records["config"]["server-round"]
    rng = np.random.default_rng([seed, int(server_round)])  # type: ignore[arg-type]
    params = model.fit(params, x, y, epochs, float(cfg["lr"]), rng)
    device_time(context.node_config, len(y) * epochs)
    content = RecordDict(
        {
            "arrays": ArrayRecord(params),
            "metrics": MetricRecord({"num-examples": len(y)}),
            TASK_RECORD: _task(context, start),
        }
    )
    return Message(content, reply_to=message)


def evaluate(message: Message, context: Context, model: Model) -> Message:
    """The ClientApp's evaluate handler: accuracy on the node's own data."""
    start = time.time()
    cfg = dict(context.run_config)
    check_eligible(context.node_config, str(cfg["requirement"]))
    x, y, _ = _node_data(context, model)
    params = message.content.array_records["arrays"].to_numpy_ndarrays()
    acc = model.accuracy(params, x, y)
    device_time(context.node_config, len(y) // 4)
    content = RecordDict(
        {
            "metrics": MetricRecord({"num-examples": len(y), "accuracy": acc}),
            TASK_RECORD: _task(context, start),
        }
    )
    return Message(content, reply_to=message)
