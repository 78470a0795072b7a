"""Compiling a policy's preference over the open jobs into a dispatch table.

Row (s, t) of the table lists the open jobs eligible for signature s and allowed on
capacity tier t, section by section in the policy's order (the whole row for a uniform
pick, its head otherwise). A job at the head of some row gets a budget: its remaining
demand, or fewer if its shrinking key would overtake the job just ahead of it in some
section of any row (ordered policies only).

A first pick works on job *classes* (group and tier restriction): a class's jobs sit in
the same row sections, so a row section's head is the first job of the earliest class
that is in it, and the compile visits classes (tens) rather than jobs (thousands). The
open jobs arrive already filed by class and order (``venn.core.open_jobs``).
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from venn.core.dispatch import NO_LIMIT, DispatchTable, overtake_count
from venn.core.open_jobs import OpenEntry, OpenJobs
from venn.core.policies.base import Policy, PolicyView

# Up to this many (jobs x row sections) a uniform pick is compiled in plain Python.
SMALL_UNIFORM = 4096


class RowSections:
    """Bit sets of the row sections each job class (group, tier restriction) is in.

    Bit ``(s * v + t) * k + section`` stands for section ``section`` of row (s, t) of a
    dispatch table over ``v`` tiers and ``k`` sections.
    """

    def __init__(self, sig_matrix: np.ndarray, table: np.ndarray | None, v: int, k: int):
        self.sig_matrix = sig_matrix
        self.table = table
        self.v = v
        self.k = k
        sigs, groups = sig_matrix.shape
        stride = v * k
        # Each group's bits for tier 0: bit s * stride + its section at s, for every
        # signature s it is eligible for (packed with numpy, read as one int).
        pos = np.arange(sigs, dtype=np.int64)[:, None] * stride
        pos = pos + table if table is not None else np.broadcast_to(pos, (sigs, groups))
        s_idx, g_idx = np.nonzero(sig_matrix)
        marks = np.zeros((groups, max(1, sigs * stride)), dtype=bool)
        marks[g_idx, pos[s_idx, g_idx]] = True
        packed = np.packbits(marks, axis=1, bitorder="little")
        self._group_bits = [int.from_bytes(row.tobytes(), "little") for row in packed]
        # Tier t's bits are tier 0's shifted by t * k; the unrestricted class has all.
        self._all_tiers = sum(1 << (t * k) for t in range(v))
        # All rows' bits of one section: sum of 2**(r*k + section) over rows r.
        row_bits = ((1 << (sigs * v * k)) - 1) // ((1 << k) - 1)
        self.section_bits = [row_bits << sec for sec in range(k)]
        self.bits: dict[int, int] = {}  # class -> its row-section bits
        # Made from ``parent`` by ``updated``: the signatures whose sections changed.
        self.parent: RowSections | None = None
        self.changed_sigs: list[int] = []

    def matches(self, sig_matrix: np.ndarray, table: np.ndarray | None, v: int) -> bool:
        return self.sig_matrix is sig_matrix and self.table is table and self.v == v

    def updated(self, table: np.ndarray) -> RowSections | None:
        """These sections for a new section table over the same eligibility (a new
        plan): only the bits of the cells whose section changed move. None if the
        tables are not comparable."""
        old = self.table
        if old is None or old.shape != table.shape:
            return None
        s_idx, g_idx = np.nonzero((old != table) & self.sig_matrix)
        new = RowSections.__new__(RowSections)
        new.sig_matrix, new.table, new.v, new.k = self.sig_matrix, table, self.v, self.k
        new._all_tiers = self._all_tiers
        new.section_bits = self.section_bits
        stride = self.v * self.k
        group_bits = self._group_bits.copy()
        for sig, g, a, b in zip(
            s_idx.tolist(),
            g_idx.tolist(),
            old[s_idx, g_idx].tolist(),
            table[s_idx, g_idx].tolist(),
            strict=True,
        ):
            group_bits[g] ^= (1 << (sig * stride + a)) | (1 << (sig * stride + b))
        new._group_bits = group_bits
        moved = set(g_idx.tolist())
        per_group = self.v + 1
        new.bits = {c: b for c, b in self.bits.items() if c // per_group not in moved}
        new.changed_sigs = sorted(set(s_idx.tolist()))
        new.parent = self
        self.parent = None  # keep one generation only
        return new

    def of(self, klass: int) -> int:
        """Bits of a class ``group * (v + 1) + tier + 1`` (tier -1: unrestricted)."""
        bits = self.bits.get(klass)
        if bits is None:
            group, tier = divmod(klass, self.v + 1)
            own = self._group_bits[group]
            bits = own * self._all_tiers if tier == 0 else own << ((tier - 1) * self.k)
            self.bits[klass] = bits
        return bits


class HeadRows:
    """Which class heads each row of a first pick, for one class order.

    Row (s, t)'s head is the first job of the earliest class (in the order of their
    first jobs) in the lowest of its row sections that holds any class. That depends
    only on the row sections and the class order, which most plan events leave as they
    were: the compiler keeps this until either changes and reads the classes' current
    first jobs through it.
    """

    row_pos: list[int]  # row -> position in ``klasses`` of its head class, -1 if none
    used: list[int]  # positions of the classes that head some row, ascending

    def __init__(
        self,
        sections: RowSections,
        klasses: list[int],
        num_sigs: int,
        last: HeadRows | None = None,
    ) -> None:
        """``last``: the head rows of the same class order over ``sections.parent``;
        only the rows of the signatures whose sections changed are assigned again."""
        self.sections = sections
        self.klasses = klasses
        bits_of = sections.of
        self.class_bits = class_bits = [bits_of(klass) for klass in klasses]
        v, k = sections.v, sections.k
        if last is None:
            row_pos = [-1] * (num_sigs * v)
            rows = sections.section_bits[0]  # every row, as its section-0 bit
        else:
            row_pos = last.row_pos.copy()
            rows = 0
            for sig in sections.changed_sigs:
                for r in range(sig * v, sig * v + v):
                    row_pos[r] = -1
                    rows |= 1 << (r * k)
        present = 0  # row sections with at least one class
        for b in class_bits:
            present |= b
        done = 0  # rows with a head, as their section-0 bits
        for sec, sec_bits in enumerate(sections.section_bits):
            want = sec_bits & (rows << sec) & ~(done << sec) & present
            if not want:
                continue
            for pos, b in enumerate(class_bits):
                hit = b & want
                if hit:
                    want ^= hit
                    while hit:
                        low = hit & -hit
                        r = (low.bit_length() - 1) // k
                        row_pos[r] = pos
                        done |= 1 << (r * k)
                        hit ^= low
                    if not want:
                        break
        self.row_pos = row_pos
        self.used = sorted(set(row_pos) - {-1})


class TableCompiler:
    """Compiles dispatch tables for one scheduler (caches what survives compiles)."""

    def __init__(self, num_tiers: int) -> None:
        self.num_tiers = num_tiers
        self._sections: RowSections | None = None
        self._head_rows: HeadRows | None = None
        # The last first pick's heads and arrays (reused while the heads stay the same).
        self._last_heads: tuple[list[int], np.ndarray, np.ndarray] | None = None
        # Overtake budgets of the last first pick, by (behind, ahead) entries.
        self._overtakes: dict[tuple[OpenEntry, OpenEntry], int] = {}

    def compile(
        self, jobs: OpenJobs, num_jobs: int, policy: Policy, view: PolicyView
    ) -> DispatchTable:
        """The table for the open jobs under the policy's current preference."""
        num_sigs = view.num_signatures
        v = self.num_tiers
        n = len(jobs)
        uniform = policy.mode == "uniform"
        if n == 0 or num_sigs == 0:
            # One row per signature known, none when none is: a caller tells a signature
            # first seen since this compile by ``sig >= rows`` (a row for no signature
            # hid the first one, and its devices were declined until the next plan event).
            width = max(1, n) if uniform else 1
            return DispatchTable(
                np.full((num_sigs, v, width), -1, dtype=np.int64),
                np.zeros((num_sigs, v), dtype=np.int64),
                uniform,
                jobs.budgets(num_jobs),
            )
        table = policy.section_table(view)
        k = 1 if table is None else policy.num_sections
        sections = self._row_sections(view.sig_matrix, table, k)
        if uniform:
            if n * num_sigs * v * k <= SMALL_UNIFORM:
                return self._uniform_small(jobs, num_jobs, sections, num_sigs)
            return self._uniform_numpy(jobs, num_jobs, view.sig_matrix, table, k)
        return self._first(jobs, num_jobs, sections, view.sig_matrix, jobs.by_key)

    def _row_sections(
        self, sig_matrix: np.ndarray, table: np.ndarray | None, k: int
    ) -> RowSections:
        """The class bit sets for the current eligibility and section tables (cached
        while both stay the same objects)."""
        cache = self._sections
        if cache is not None and cache.matches(sig_matrix, table, self.num_tiers):
            return cache
        new = None
        if (
            cache is not None
            and table is not None
            and cache.sig_matrix is sig_matrix
            and cache.v == self.num_tiers
            and cache.k == k
        ):
            new = cache.updated(table)
        if new is None:
            new = RowSections(sig_matrix, table, self.num_tiers, k)
        self._sections = new
        return new

    def _first(
        self,
        jobs: OpenJobs,
        num_jobs: int,
        sections: RowSections,
        sig_matrix: np.ndarray,
        ordered: bool,
    ) -> DispatchTable:
        """A first pick: each row's head, and the heads' budgets."""
        heads = jobs.heads  # (first order key, class), in the order of first jobs
        klasses = [klass for _, klass in heads]
        rows = self._head_rows
        if rows is None or rows.klasses != klasses:
            rows = self._head_rows = HeadRows(sections, klasses, sig_matrix.shape[0])
        elif rows.sections is not sections:
            # A new plan moved some signatures' sections: assign only their rows again.
            since = rows if sections.parent is rows.sections else None
            rows = self._head_rows = HeadRows(sections, klasses, sig_matrix.shape[0], since)
        # Each class's first job (order keys are (key, idx) when ordered, else idx).
        head_job: list[int] = (
            [first[1] for first, _ in heads]  # type: ignore[index]
            if ordered
            else [first for first, _ in heads]  # type: ignore[misc]
        )
        head_job.append(-1)  # position -1: a row nobody heads
        head = [head_job[p] for p in rows.row_pos]
        budget = jobs.budgets(num_jobs)
        if ordered:
            self._head_budgets(jobs, rows, budget)
        v = self.num_tiers
        sigs = sig_matrix.shape[0]
        last = self._last_heads
        if last is not None and last[0] == head:
            candidates, counts = last[1], last[2]
        else:
            candidates = np.array(head, dtype=np.int64).reshape(sigs, v, 1)
            counts = (candidates[:, :, 0] >= 0).astype(np.int64)  # the head, or nobody
            candidates.flags.writeable = False  # shared by the tables of equal heads
            counts.flags.writeable = False
            self._last_heads = (head, candidates, counts)
        return DispatchTable(candidates, counts, False, budget, head)

    def _head_budgets(self, jobs: OpenJobs, rows: HeadRows, budget: np.ndarray) -> None:
        """Cap each head's budget at its first overtake of the nearest job ahead of it
        that shares one of its row sections."""
        heads = jobs.heads
        order = jobs.order
        entries = jobs.entries
        bits_of = rows.sections.bits  # every open job's class is among the heads'
        class_bits = rows.class_bits
        old = self._overtakes
        new: dict[tuple[OpenEntry, OpenEntry], int] = {}
        for pos in rows.used:
            if pos == 0:
                continue  # the first job of all: nobody is ahead of it
            first = heads[pos][0]
            b = class_bits[pos]
            # The nearest job ahead sharing a row section is the one overtaken first.
            q = bisect_left(order, first) - 1  # type: ignore[arg-type]
            # Order keys are (key, idx) here.
            while q >= 0 and not bits_of[entries[order[q][1]].klass] & b:  # type: ignore[index]
                q -= 1
            if q < 0:
                continue
            behind = entries[first[1]]  # type: ignore[index]
            ahead = entries[order[q][1]]  # type: ignore[index]
            pair = (behind, ahead)  # entries never change once filed
            limit = old.get(pair)
            if limit is None:
                limit = overtake_count(
                    behind.remaining,
                    behind.weight,
                    behind.idx,
                    ahead.remaining,
                    ahead.weight,
                    ahead.idx,
                )
            new[pair] = limit
            if limit < behind.remaining:
                budget[behind.idx] = limit
        self._overtakes = new

    def _uniform_small(
        self, jobs: OpenJobs, num_jobs: int, sections: RowSections, num_sigs: int
    ) -> DispatchTable:
        """A uniform pick in plain Python over bit sets (fast for small instances)."""
        v, k = self.num_tiers, sections.k
        n = len(jobs)
        entries = jobs.entries
        ordered = jobs.in_order()
        bits = [sections.of(entries[i].klass) for i in ordered]
        flat: list[int] = []
        counts = []
        rows = []
        for r in range(num_sigs * v):
            row: list[int] = []
            for sec in range(k):
                bit = 1 << (r * k + sec)
                row.extend([i for i, b in zip(ordered, bits, strict=True) if b & bit])
            counts.append(len(row))
            rows.append(row)
            flat.extend(row)
            flat.extend([-1] * (n - len(row)))
        return DispatchTable(
            np.array(flat, dtype=np.int64).reshape(num_sigs, v, n),
            np.array(counts, dtype=np.int64).reshape(num_sigs, v),
            True,
            jobs.budgets(num_jobs),
            row_lists=rows,
        )

    def _uniform_numpy(
        self,
        jobs: OpenJobs,
        num_jobs: int,
        sig_matrix: np.ndarray,
        table: np.ndarray | None,
        k: int,
    ) -> DispatchTable:
        """A uniform pick with numpy: masks over the jobs in preference order, compacted
        row by row into full candidate lists."""
        sigs = sig_matrix.shape[0]
        v = self.num_tiers
        n = len(jobs)
        entries = jobs.entries
        ordered = jobs.in_order()
        idx_s = np.array(ordered, dtype=np.int64)
        group_s = np.array([entries[i].group for i in ordered], dtype=np.int64)
        tiers = [entries[i].tier for i in ordered]
        tier_s = np.array([-1 if t is None else t for t in tiers], dtype=np.int64)
        eligible = sig_matrix[:, group_s]  # [signatures, jobs in preference order]
        if table is None:
            keep = eligible
        else:
            section_s = table[:, group_s]
            keep = np.concatenate([eligible & (section_s == i) for i in range(k)], axis=1)
        if v > 1:
            if (tier_s >= 0).any():
                allowed = (tier_s < 0) | (tier_s == np.arange(v)[:, None])  # [tiers, jobs]
                if k > 1:
                    allowed = np.tile(allowed, k)
                keep = (keep[:, None, :] & allowed[None, :, :]).reshape(sigs * v, k * n)
            else:
                keep = np.repeat(keep, v, axis=0)
        # Row-major nonzero lists each row's entries in order: section, then preference.
        rows, cols = np.nonzero(keep)
        counts = np.bincount(rows, minlength=sigs * v)
        starts = np.cumsum(counts) - counts
        pos = np.arange(len(rows)) - starts[rows]
        picked = cols % n if k > 1 else cols  # position in preference order
        candidates = np.full((sigs * v, n), -1, dtype=np.int64)
        candidates[rows, pos] = idx_s[picked]
        return DispatchTable(
            candidates.reshape(sigs, v, n), counts.reshape(sigs, v), True, jobs.budgets(num_jobs)
        )


__all__ = ["NO_LIMIT", "RowSections", "TableCompiler"]
