"""What an example app brings to the experiment: a task (its teacher) and a numpy model,
and the record of a task's timing a node returns with its result."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from devtools.flower_testbed.data import Teacher

TASK_RECORD = "task"


class Model(Protocol):
    """What an app brings: a task (its teacher) and a numpy model."""

    dim: int
    classes: int

    def teacher(self, task_seed: int) -> Teacher: ...

    def init(self, seed: int) -> list[np.ndarray]: ...

    def fit(
        self,
        params: list[np.ndarray],
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        lr: float,
        rng: np.random.Generator,
    ) -> list[np.ndarray]: ...

    def accuracy(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float: ...


def config_int(config: dict[str, Any], key: str) -> int:
    return int(config[key])
