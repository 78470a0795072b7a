"""A one-hidden-layer MLP (numpy, softmax output) on a nonlinear three-class teacher:
y = argmax(tanh(x U) V) for random U, V of the task seed."""

from __future__ import annotations

import numpy as np

from devtools.flower_testbed.data import Teacher

HIDDEN = 16


class MLP:
    dim = 4
    classes = 3

    def teacher(self, task_seed: int) -> Teacher:
        rng = np.random.default_rng(task_seed)
        u, v = rng.standard_normal((self.dim, 8)), rng.standard_normal((8, self.classes))
        return lambda x: np.argmax(np.tanh(x @ u) @ v, axis=1)

    def init(self, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed + 7)
        return [
            rng.standard_normal((self.dim, HIDDEN)) / np.sqrt(self.dim),
            np.zeros(HIDDEN),
            rng.standard_normal((HIDDEN, self.classes)) / np.sqrt(HIDDEN),
            np.zeros(self.classes),
        ]

    @staticmethod
    def _forward(params: list[np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w1, b1, w2, b2 = params
        h = np.tanh(x @ w1 + b1)
        logits = h @ w2 + b2
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return h, p / p.sum(axis=1, keepdims=True)

    def fit(
        self,
        params: list[np.ndarray],
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        lr: float,
        rng: np.random.Generator,
    ) -> list[np.ndarray]:
        w1, b1, w2, b2 = (p.copy() for p in params)
        for _ in range(epochs):
            for batch in np.array_split(rng.permutation(len(y)), max(1, len(y) // 32)):
                xb = x[batch]
                h, p = self._forward([w1, b1, w2, b2], xb)
                d2 = p.copy()
                d2[np.arange(len(batch)), y[batch]] -= 1.0
                d2 /= len(batch)
                d1 = (d2 @ w2.T) * (1.0 - h**2)
                w2 -= lr * h.T @ d2
                b2 -= lr * d2.sum(axis=0)
                w1 -= lr * xb.T @ d1
                b1 -= lr * d1.sum(axis=0)
        return [w1, b1, w2, b2]

    def accuracy(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
        return float((np.argmax(self._forward(params, x)[1], axis=1) == y).mean())


MODEL = MLP()
