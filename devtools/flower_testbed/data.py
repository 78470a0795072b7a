"""Synthetic classification data every node makes from its own seed: inputs from a normal
distribution, labels from a fixed teacher (the task, from the run's task seed), and a
non-IID split by label skew (each node's class mix drawn from a Dirichlet distribution).

Pure numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Teacher = Callable[[np.ndarray], np.ndarray]
"""Inputs (n, dim) -> labels (n,)."""


def sample(
    teacher: Teacher, dim: int, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((n, dim))
    return x, teacher(x)


def node_split(
    teacher: Teacher,
    dim: int,
    classes: int,
    n: int,
    seed: int,
    alpha: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` examples of one node: its class mix ~ Dirichlet(alpha), drawn from its seed."""
    rng = np.random.default_rng(seed)
    mix = rng.dirichlet(np.full(classes, alpha))
    want = np.floor(mix * n).astype(int)
    want[int(np.argmax(mix))] += n - int(want.sum())
    x, y = sample(teacher, dim, 40 * n, rng)
    keep = np.concatenate([np.flatnonzero(y == c)[: want[c]] for c in range(classes)])
    rng.shuffle(keep)
    return x[keep], y[keep]
