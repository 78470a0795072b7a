"""Compiled inner loop of the fast simulator (numba): one step's check-ins decided
against a static dispatch table, and their tasks accounted in the open rounds' results.

The Python loop it replaces spent about 1 us per check-in and per assignment; here a step
costs one call. The arithmetic is the event mode's, operation for operation (a task's
response ``noise + w * comp + transfer``, its finish ``time + response``, success iff
``finish <= end + slack``; numba does not fuse or reorder float operations without
fastmath), and ties are broken as there, so both modes give identical results.

Round results live in per-job rows of 2D arrays (``venn.sim.rounds.RoundStore``): the
finish times, tiers and response times in check-in order, and a sorted copy of the
finish times once a round could close (before that no close time exists).
"""

from __future__ import annotations

import numba as nb
import numpy as np

_INF = np.inf


@nb.njit(cache=True)
def scan_first(
    keys: np.ndarray,
    heads: np.ndarray,
    budget: np.ndarray,
    i: int,
    j: int,
    job_out: np.ndarray,
    pos_out: np.ndarray,
) -> tuple[int, int]:
    """Decide check-ins ``i``.. (before ``j``) with each row's head ``heads[key]`` until
    one exhausts its job's budget: the number of assignments written to ``job_out`` /
    ``pos_out`` (in check-in order) and the last check-in assigned (-1 if none)."""
    num_rows = heads.shape[0]
    taken = np.zeros(budget.shape[0], dtype=np.int64)
    m = 0
    last = -1
    for c in range(i, j):
        key = keys[c]
        if key >= num_rows:
            continue
        job = heads[key]
        if job < 0:
            continue
        last = c
        job_out[m] = job
        pos_out[m] = c
        m += 1
        taken[job] += 1
        if taken[job] >= budget[job]:
            break
    return m, last


@nb.njit(cache=True)
def scan_uniform(
    keys: np.ndarray,
    candidates: np.ndarray,
    counts: np.ndarray,
    us: np.ndarray,
    budget: np.ndarray,
    i: int,
    j: int,
    job_out: np.ndarray,
    pos_out: np.ndarray,
) -> tuple[int, int]:
    """``scan_first`` for a uniform pick: row ``key`` lists ``counts[key]`` candidates
    and check-in ``c`` takes ``candidates[key, min(int(us[c] * n), n - 1)]``."""
    num_rows = counts.shape[0]
    taken = np.zeros(budget.shape[0], dtype=np.int64)
    m = 0
    last = -1
    for c in range(i, j):
        key = keys[c]
        if key >= num_rows:
            continue
        n = counts[key]
        if n == 0:
            continue
        job = candidates[key, min(int(us[c] * n), n - 1)]
        last = c
        job_out[m] = job
        pos_out[m] = c
        m += 1
        taken[job] += 1
        if taken[job] >= budget[job]:
            break
    return m, last


@nb.njit(cache=True)
def kth_of_union(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) value of two sorted arrays together (k <= total)."""
    lo, hi = max(0, k - a.shape[0]), min(k, b.shape[0])
    while lo < hi:  # smallest count t taken from b with b[t] >= a[k - t - 1]
        t = (lo + hi) // 2
        if b[t] < a[k - t - 1]:
            lo = t + 1
        else:
            hi = t
    if lo == 0:
        return a[k - 1]  # type: ignore[no-any-return]
    if lo == k:
        return b[k - 1]  # type: ignore[no-any-return]
    return max(a[k - lo - 1], b[lo - 1])  # type: ignore[no-any-return]


@nb.njit(cache=True)
def ensure_sorted(
    finish: np.ndarray, ordered: np.ndarray, is_sorted: np.ndarray, count: np.ndarray, job: int
) -> None:
    """Make job ``job``'s sorted copy of its finish times if it has none."""
    if not is_sorted[job]:
        n = count[job]
        ordered[job, :n] = np.sort(finish[job, :n])
        is_sorted[job] = True


@nb.njit(cache=True)
def merge_sorted(ordered: np.ndarray, n: int, new: np.ndarray) -> None:
    """Merge sorted ``new`` into the sorted first ``n`` values of ``ordered`` (in place,
    from the back; ``ordered`` has room for ``n + len(new)``)."""
    a = n - 1
    b = new.shape[0] - 1
    w = n + new.shape[0] - 1
    while b >= 0:
        if a >= 0 and ordered[a] > new[b]:
            ordered[w] = ordered[a]
            a -= 1
        else:
            ordered[w] = new[b]
            b -= 1
        w -= 1


@nb.njit(cache=True)
def commit(
    job_in: np.ndarray,
    pos_in: np.ndarray,
    m: int,
    i: int,
    j: int,
    stop: int,
    time: np.ndarray,
    end: np.ndarray,
    noise: np.ndarray,
    comp: np.ndarray,
    transfer: np.ndarray,
    tiers: np.ndarray,
    slack: float,
    workload: np.ndarray,
    needed: np.ndarray,
    finish: np.ndarray,
    tier_res: np.ndarray,
    resp_res: np.ndarray,
    ordered: np.ndarray,
    is_sorted: np.ndarray,
    count: np.ndarray,
    out: np.ndarray,
    kth: np.ndarray,
    grouped: np.ndarray,
) -> tuple[int, int]:
    """Run the tasks of a step's ``m`` assignments (``job_in[q]`` at check-in
    ``pos_in[q]``, in check-in order) and add the successful ones to their rounds.

    As ``Simulation._commit_step``: if a round these results complete closes before
    the step's last check-in (``i + stop - 1``), the step ends at that close and the
    later assignments are dropped (the next table decides them again). Returns the
    check-ins used (-1 if a row lacks room) and the number of jobs; per job (ascending
    idx) ``out`` holds (idx, assignments kept, failed tasks, offset of its check-ins in
    ``grouped``), and ``kth`` the time of its round's ``needed``-th result if this step
    added results (else inf).
    """
    num_jobs = needed.shape[0]
    per_job = np.zeros(num_jobs, dtype=np.int64)
    for q in range(m):
        per_job[job_in[q]] += 1
    for job in range(num_jobs):
        if count[job] + per_job[job] > finish.shape[1]:
            return -1, 0  # no room in its row: the caller must reserve first
    start = np.zeros(num_jobs + 1, dtype=np.int64)
    jobs = 0
    for job in range(num_jobs):
        start[job + 1] = start[job] + per_job[job]
        if per_job[job] > 0:
            out[jobs, 0] = job
            out[jobs, 3] = start[job]
            jobs += 1
    fill = start[:num_jobs].copy()
    for q in range(m):  # grouped by job, each in check-in order
        job = job_in[q]
        grouped[fill[job]] = pos_in[q]
        fill[job] += 1
    task_finish = np.empty(m, dtype=np.float64)
    task_resp = np.empty(m, dtype=np.float64)
    task_ok = np.empty(m, dtype=np.bool_)
    cut = _INF
    for s in range(jobs):
        job = out[s, 0]
        w = workload[job]
        a, b = start[job], start[job + 1]
        good = 0
        for q in range(a, b):
            c = grouped[q]
            r = noise[c] + w * comp[c] + transfer[c]
            f = time[c] + r
            task_resp[q] = r
            task_finish[q] = f
            ok = f <= end[c] + slack
            task_ok[q] = ok
            if ok:
                good += 1
        k = needed[job]
        if count[job] + good >= k:
            new = np.empty(good, dtype=np.float64)
            g = 0
            for q in range(a, b):
                if task_ok[q]:
                    new[g] = task_finish[q]
                    g += 1
            new.sort()
            ensure_sorted(finish, ordered, is_sorted, count, job)
            cut = min(cut, kth_of_union(ordered[job, : count[job]], new, k))
    limit = j
    if cut <= time[i + stop - 1]:
        # A round this step closes changes the plan: the check-ins from the close on
        # belong to the next step (a timed event at t runs before a check-in at t).
        stop = int(np.searchsorted(time[i:j], cut))
        limit = i + stop
    for s in range(jobs):
        job = out[s, 0]
        a, b = start[job], start[job + 1]
        kept = 0
        n = count[job]
        first_new = n
        for q in range(a, b):
            c = grouped[q]
            if c >= limit:
                break
            kept += 1
            if task_ok[q]:
                finish[job, n] = task_finish[q]
                tier_res[job, n] = tiers[c]
                resp_res[job, n] = task_resp[q]
                n += 1
        out[s, 1] = kept
        out[s, 2] = kept - (n - first_new)
        if is_sorted[job] and n > first_new:
            new = finish[job, first_new:n].copy()
            new.sort()
            merge_sorted(ordered[job], first_new, new)
        count[job] = n
        k = needed[job]
        if n >= k and n > first_new:
            ensure_sorted(finish, ordered, is_sorted, count, job)
            kth[s] = ordered[job, k - 1]
        else:
            kth[s] = _INF
    return stop, jobs


@nb.njit(cache=True)
def step_first(
    keys: np.ndarray,
    heads: np.ndarray,
    budget: np.ndarray,
    i: int,
    j: int,
    job_buf: np.ndarray,
    pos_buf: np.ndarray,
    time: np.ndarray,
    end: np.ndarray,
    noise: np.ndarray,
    comp: np.ndarray,
    transfer: np.ndarray,
    tiers: np.ndarray,
    slack: float,
    workload: np.ndarray,
    needed: np.ndarray,
    finish: np.ndarray,
    tier_res: np.ndarray,
    resp_res: np.ndarray,
    ordered: np.ndarray,
    is_sorted: np.ndarray,
    count: np.ndarray,
    out: np.ndarray,
    kth: np.ndarray,
    grouped: np.ndarray,
) -> tuple[int, int]:
    """``scan_first`` then ``commit`` in one call; (0, 0) if nothing was assigned."""
    m, last = scan_first(keys, heads, budget, i, j, job_buf, pos_buf)
    if last < 0:
        return 0, 0
    return commit(  # type: ignore[no-any-return]
        job_buf, pos_buf, m, i, j, last - i + 1, time, end, noise, comp, transfer, tiers,
        slack, workload, needed, finish, tier_res, resp_res, ordered, is_sorted, count, out,
        kth, grouped,
    )  # fmt: skip


@nb.njit(cache=True)
def step_uniform(
    keys: np.ndarray,
    candidates: np.ndarray,
    counts: np.ndarray,
    us: np.ndarray,
    budget: np.ndarray,
    i: int,
    j: int,
    job_buf: np.ndarray,
    pos_buf: np.ndarray,
    time: np.ndarray,
    end: np.ndarray,
    noise: np.ndarray,
    comp: np.ndarray,
    transfer: np.ndarray,
    tiers: np.ndarray,
    slack: float,
    workload: np.ndarray,
    needed: np.ndarray,
    finish: np.ndarray,
    tier_res: np.ndarray,
    resp_res: np.ndarray,
    ordered: np.ndarray,
    is_sorted: np.ndarray,
    count: np.ndarray,
    out: np.ndarray,
    kth: np.ndarray,
    grouped: np.ndarray,
) -> tuple[int, int]:
    """``scan_uniform`` then ``commit`` in one call; (0, 0) if nothing was assigned."""
    m, last = scan_uniform(keys, candidates, counts, us, budget, i, j, job_buf, pos_buf)
    if last < 0:
        return 0, 0
    return commit(  # type: ignore[no-any-return]
        job_buf, pos_buf, m, i, j, last - i + 1, time, end, noise, comp, transfer, tiers,
        slack, workload, needed, finish, tier_res, resp_res, ordered, is_sorted, count, out,
        kth, grouped,
    )  # fmt: skip


@nb.njit(cache=True)
def insert_sorted(ordered: np.ndarray, n: int, value: float) -> None:
    """Insert ``value`` into the sorted first ``n`` values of ``ordered`` (room for one
    more), after any equal ones."""
    w = n
    while w > 0 and ordered[w - 1] > value:
        ordered[w] = ordered[w - 1]
        w -= 1
    ordered[w] = value


@nb.njit(cache=True)
def kth_finish(
    finish: np.ndarray,
    ordered: np.ndarray,
    is_sorted: np.ndarray,
    count: np.ndarray,
    job: int,
    k: int,
) -> float:
    """Time of job ``job``'s k-th result so far (inf if fewer)."""
    if count[job] < k:
        return _INF
    ensure_sorted(finish, ordered, is_sorted, count, job)
    return ordered[job, k - 1]  # type: ignore[no-any-return]


@nb.njit(cache=True)
def arrivals(
    finish: np.ndarray,
    tier_res: np.ndarray,
    resp_res: np.ndarray,
    ordered: np.ndarray,
    is_sorted: np.ndarray,
    count: np.ndarray,
    job: int,
    t: float,
    detail: bool,
) -> tuple[int, np.ndarray, np.ndarray]:
    """Job ``job``'s results that arrived by ``t``: their number, and with ``detail``
    their tiers and response times by arrival (a stable sort by finish time: ties in
    check-in order), else empty arrays."""
    ensure_sorted(finish, ordered, is_sorted, count, job)
    n = count[job]
    arrived = int(np.searchsorted(ordered[job, :n], t, side="right"))
    if not detail:
        return arrived, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    kept = np.argsort(finish[job, :n], kind="mergesort")[:arrived]
    return arrived, tier_res[job, :n][kept], resp_res[job, :n][kept]


@nb.njit(cache=True)
def dispatched_after(finish: np.ndarray, count: np.ndarray, job: int, t: float) -> int:
    """Job ``job``'s results (in check-in order) after the last one that finished by
    ``t``: all of them finished after ``t``."""
    n = count[job]
    last = -1
    for q in range(n):
        if finish[job, q] <= t:
            last = q
    return n - 1 - last  # type: ignore[no-any-return]
