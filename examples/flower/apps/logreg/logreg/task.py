"""Binary logistic regression (numpy) on a linear teacher: y = [x . w > 0]."""

from __future__ import annotations

import numpy as np

from devtools.flower_testbed.data import Teacher


class LogReg:
    dim = 10
    classes = 2

    def teacher(self, task_seed: int) -> Teacher:
        w = np.random.default_rng(task_seed).standard_normal(self.dim)
        return lambda x: (x @ w > 0).astype(np.int64)

    def init(self, seed: int) -> list[np.ndarray]:
        return [np.zeros(self.dim), np.zeros(1)]

    def fit(
        self,
        params: list[np.ndarray],
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        lr: float,
        rng: np.random.Generator,
    ) -> list[np.ndarray]:
        w, b = params[0].copy(), params[1].copy()
        for _ in range(epochs):
            for batch in np.array_split(rng.permutation(len(y)), max(1, len(y) // 32)):
                p = 1.0 / (1.0 + np.exp(-(x[batch] @ w + b)))
                err = p - y[batch]
                w -= lr * x[batch].T @ err / len(batch)
                b -= lr * err.mean(keepdims=True)
        return [w, b]

    def accuracy(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
        w, b = params
        return float(((x @ w + b > 0).astype(np.int64) == y).mean())


MODEL = LogReg()
