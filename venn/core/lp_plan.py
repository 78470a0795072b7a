"""Ownership from a receding-horizon LP: which job group each device signature serves.

IRS (``venn.core.irs``) decides ownership greedily, one pair of groups at a time, from
the queues of the jobs with open rounds. Here ownership comes from the fluid schedule of
*every* unfinished job over a horizon, solved as one LP (Gavel's way of planning an
allocation and letting the mechanism follow it):

- time from now is cut into slots that double in length (``first_slot_s``, then twice
  that, ...), up to the time the whole backlog would take at the current supply;
- in slot k, signature s sends ``f[s, g, k]`` devices to group g (only where its devices
  are eligible), at most its supply rate times the slot;
- a group's devices go to its jobs (``u[j, k]``), each job at most ``cap_j`` per second
  (a round's D devices per fill-and-collect cycle: a job cannot absorb more) and at most
  its remaining work over the horizon;
- the objective is the fluid relaxation of the mean completion time: a unit of job j's
  work done in slot k saves ``(H - start_k) / W_j`` (W_j its remaining work, H the
  horizon's end), so small jobs first, but a large one is not starved while the supply it
  alone can use is idle.

The owner of signature s is the group the first slot sends most of its devices to; a
device whose owner has no open round falls through to the others, as under IRS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Backlog:
    """An unfinished job as the plan sees it."""

    group: int
    work: float
    """Devices still to assign over its life."""
    cap_per_s: float
    """The most devices per second it can take."""


def horizon_slots(first_s: float, total_s: float, most: int = 12) -> np.ndarray:
    """Slot lengths: ``first_s`` doubling until they cover ``total_s`` (at most ``most``)."""
    out = [first_s]
    while sum(out) < total_s and len(out) < most:
        out.append(2 * out[-1])
    return np.array(out, dtype=np.float64)


def lp_owner(
    sig_matrix: np.ndarray,
    sig_rates: np.ndarray,
    jobs: Sequence[Backlog],
    first_slot_s: float,
) -> np.ndarray:
    """Owner group of every signature (-1: none wanted), from the LP above.

    ``sig_rates`` are check-ins per second per signature; ``sig_matrix`` is boolean
    [signatures, groups]."""
    from scipy import sparse  # only a plan by LP needs scipy (slow to import)
    from scipy.optimize import linprog

    num_sigs, num_groups = sig_matrix.shape
    owner = np.full(num_sigs, -1, dtype=np.int64)
    jobs = [j for j in jobs if j.work > 0 and j.cap_per_s > 0]
    total_rate = float(np.sum(sig_rates))
    if not jobs or total_rate <= 0:
        return owner
    backlog_s = sum(j.work for j in jobs) / total_rate
    slots = horizon_slots(first_slot_s, backlog_s)
    starts = np.concatenate([[0.0], np.cumsum(slots)[:-1]])
    end = float(np.sum(slots))
    k_n = len(slots)
    pairs = np.argwhere(sig_matrix)  # eligible (s, g)
    p_n, j_n = len(pairs), len(jobs)
    n_f, n_u = p_n * k_n, j_n * k_n
    # Variables: f[p, k] at p * k_n + k, then u[j, k] at n_f + j * k_n + k.
    gain = np.zeros(n_f + n_u)
    for j, job in enumerate(jobs):
        gain[n_f + j * k_n : n_f + (j + 1) * k_n] = (end - starts) / job.work
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    for s in range(num_sigs):  # supply of s in slot k
        ps = np.flatnonzero(pairs[:, 0] == s)
        if not len(ps):
            continue
        for k in range(k_n):
            rows += [r] * len(ps)
            cols += (ps * k_n + k).tolist()
            vals += [1.0] * len(ps)
            rhs.append(float(sig_rates[s]) * slots[k])
            r += 1
    group_of = np.array([j.group for j in jobs])
    e_rows: list[int] = []
    e_cols: list[int] = []
    e_vals: list[float] = []
    e = 0
    for g in range(num_groups):  # a group's jobs take exactly what is sent to it
        pg = np.flatnonzero(pairs[:, 1] == g)
        jg = np.flatnonzero(group_of == g)
        for k in range(k_n):
            if not len(jg) and not len(pg):
                continue
            e_rows += [e] * (len(jg) + len(pg))
            e_cols += (n_f + jg * k_n + k).tolist() + (pg * k_n + k).tolist()
            e_vals += [1.0] * len(jg) + [-1.0] * len(pg)
            e += 1
    for j, job in enumerate(jobs):  # at most its remaining work
        rows += [r] * k_n
        cols += list(range(n_f + j * k_n, n_f + (j + 1) * k_n))
        vals += [1.0] * k_n
        rhs.append(job.work)
        r += 1
    upper = np.full(n_f + n_u, np.inf)
    for j, job in enumerate(jobs):
        upper[n_f + j * k_n : n_f + (j + 1) * k_n] = job.cap_per_s * slots
    n = n_f + n_u
    res = linprog(
        -gain,
        A_ub=sparse.csr_matrix((vals, (rows, cols)), shape=(r, n)),
        b_ub=np.array(rhs),
        A_eq=sparse.csr_matrix((e_vals, (e_rows, e_cols)), shape=(e, n)),
        b_eq=np.zeros(e),
        bounds=np.c_[np.zeros_like(upper), upper],
    )
    if res.status != 0:
        return owner
    first = res.x[:n_f].reshape(p_n, k_n)[:, 0]
    best = np.zeros(num_sigs)
    for (s, g), x in zip(pairs.tolist(), first.tolist(), strict=True):
        if x > best[s] + 1e-9:
            best[s] = x
            owner[s] = g
    return owner
