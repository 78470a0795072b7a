"""Device check-in traces: columnar batches, a synthetic generator and a FedScale loader.

A check-in is a device becoming available (charging, on Wi-Fi) for the window
``[time, end]``. Sources stream :class:`CheckinBatch` chunks in time order and lazily:
the reference simulator built every replayed check-in up front (tens of GB), which this
module never does.

Synthetic substitute for the FedScale traces (which are not shipped)
--------------------------------------------------------------------
* Arrivals: non-homogeneous Poisson process with the diurnal rate
  ``rate(t) = rate_per_s * (1 + 0.5 * cos(2π (t - peak_s) / 86400))``, peak at 22:00 of
  trace time (phones charge at night); its daily mean is exactly ``rate_per_s`` (3/s).
  Generated one chunk (default one hour) at a time; chunk ``k`` uses its own RNG
  ``default_rng([seed, k])`` so it is reproducible on its own.
* Windows: log-normal, median 600 s, sigma 1.0 (mean ≈ 16.5 min), clipped to [1 s, 4 h].
* Identity: the ``n``-th check-in of the trace (global index) belongs to device
  ``n % num_devices``; at ≈3/s and 136k devices a device returns every ≈12.6 h (at least
  ≈8.4 h at the diurnal peak), so the 4 h cap keeps a device's windows disjoint; the
  constructor refuses parameters that could break this.
* Capacity: fixed per device id, log-normal with mean 1.0 (``mu = -sigma²/2``), i.e. fleet
  means 78 ms/sample and 13,736 kbps. Compute sigma 0.668 (median 0.8 of the mean, like
  FedScale's compute latencies); bandwidth sigma 1.2 (median 0.49 of the mean, heavy
  tail). The ``60*comp + 10/comm`` proxy then has quartiles ≈ 53/80/124 s and 95th
  percentile ≈ 241 s (reference simulator, on FedScale data: 57/120/170 s and 274 s).
  Drawn by hashing ``(seed, device id)``, so a device's capacity does not depend on the
  fleet size and is shared with the FedScale loader's fallback.
* ``noise`` ~ U(0, 2) s dispatch noise and ``u`` ~ U(0, 1) are drawn per check-in.
* Profile: ``device_id % 959`` (the eligibility list of the paper).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from venn.core.capacity import FLEET_MEAN_COMM_KBPS, FLEET_MEAN_COMP_MS

NUM_PROFILES = 959
DAY_S = 86_400.0

COMP_SIGMA = math.sqrt(-2.0 * math.log(0.8))  # median = 0.8 x mean
COMM_SIGMA = 1.2
WINDOW_MEDIAN_S = 600.0
WINDOW_SIGMA = 1.0
WINDOW_MIN_S = 1.0
WINDOW_CAP_S = 4 * 3600.0
DIURNAL_AMPLITUDE = 0.5
PEAK_S = 22 * 3600.0
CHUNK_S = 3600.0
NOISE_MAX_S = 2.0

_CAPACITY_SALT = 0x43415041  # "CAPA": keeps capacity draws apart from chunk RNG streams


@dataclass(frozen=True)
class CheckinBatch:
    """Time-sorted check-ins in columns (one array per field, equal lengths)."""

    time: np.ndarray  # float64, seconds since trace start, ascending
    end: np.ndarray  # float64, end of the availability window (> time)
    device_id: np.ndarray  # int64
    profile: np.ndarray  # int32 index into DeviceProfiles
    comp: np.ndarray  # float64 compute latency / fleet mean (1.0 = average device)
    comm: np.ndarray  # float64 bandwidth / fleet mean
    noise: np.ndarray  # float64 U(0,2) s dispatch noise
    u: np.ndarray  # float64 U(0,1) per-check-in draw for randomised policies

    DTYPES: ClassVar[dict[str, type]] = {
        "time": np.float64,
        "end": np.float64,
        "device_id": np.int64,
        "profile": np.int32,
        "comp": np.float64,
        "comm": np.float64,
        "noise": np.float64,
        "u": np.float64,
    }

    def __post_init__(self) -> None:
        n = None
        for f in fields(self):
            column: np.ndarray = np.asarray(getattr(self, f.name), dtype=self.DTYPES[f.name])
            object.__setattr__(self, f.name, column)
            if column.ndim != 1 or (n is not None and column.shape[0] != n):
                raise ValueError(f"column {f.name!r} must be 1-D of length {n}")
            n = column.shape[0]

    def __len__(self) -> int:
        return int(self.time.shape[0])

    def slice(self, i: int, j: int) -> CheckinBatch:
        """Check-ins ``i`` to ``j`` (exclusive) as views of this batch's columns."""
        return CheckinBatch(**{f.name: getattr(self, f.name)[i:j] for f in fields(self)})

    def take(self, index: np.ndarray) -> CheckinBatch:
        """The check-ins at ``index`` (an integer or boolean array), in that order."""
        return CheckinBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def shifted(self, dt: float) -> CheckinBatch:
        """The same check-ins ``dt`` seconds later."""
        return replace(self, time=self.time + dt, end=self.end + dt)

    @classmethod
    def empty(cls) -> CheckinBatch:
        """A batch with no check-ins."""
        return cls(**{name: np.empty(0, dtype=dt) for name, dt in cls.DTYPES.items()})


def concat(batches: Iterable[CheckinBatch]) -> CheckinBatch:
    """Concatenate batches into one, stably re-sorted by time if they were not in order."""
    parts = list(batches)
    if not parts:
        return CheckinBatch.empty()
    out = CheckinBatch(
        **{name: np.concatenate([getattr(b, name) for b in parts]) for name in CheckinBatch.DTYPES}
    )
    if len(out) > 1 and bool((np.diff(out.time) < 0).any()):
        out = out.take(np.argsort(out.time, kind="stable"))
    return out


def task_duration(
    batch: CheckinBatch, workload_s: float = 30.0, transfer_s: float = 10.0
) -> np.ndarray:
    """Task time per check-in: ``W*comp + 2*C/comm`` (compute, then download + upload)."""
    return workload_s * batch.comp + 2.0 * transfer_s / batch.comm


@runtime_checkable
class CheckinSource(Protocol):
    """A check-in trace streamed lazily in time order."""

    # Read-only so frozen dataclasses satisfy it: a source's ``name: str``.
    @property
    def name(self) -> str:
        """Human-readable name of the source (for logs and reports)."""
        ...

    def chunks(self, start: float = 0.0, end: float = math.inf) -> Iterator[CheckinBatch]:
        """Non-empty batches covering check-ins with ``start <= time < end``, in order."""
        ...


# -- per-device capacity -------------------------------------------------------------

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(x: np.ndarray) -> np.ndarray:
    # splitmix64 finaliser: a bijective avalanche on uint64 (array arithmetic wraps).
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _unit(h: np.ndarray) -> np.ndarray:
    """Uniform in (0, 1] from the top 53 bits of a hash."""
    return ((h >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53


def synthetic_capacity(device_ids: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Normalised ``(comp, comm)`` of devices, a pure function of ``(seed, device id)``.

    Both log-normal with mean 1.0: compute sigma ``COMP_SIGMA`` (median 0.8), bandwidth
    sigma ``COMM_SIGMA`` (heavy tail).
    """
    ids = np.asarray(device_ids, dtype=np.int64).astype(np.uint64)
    base = _mix64(np.array([(seed & 0xFFFFFFFF) ^ (_CAPACITY_SALT << 32)], dtype=np.uint64))
    counter = base + (ids * np.uint64(2)) * _GAMMA
    u1 = _unit(_mix64(counter))
    u2 = _unit(_mix64(counter + _GAMMA))
    radius = np.sqrt(-2.0 * np.log(u1))
    z_comp = radius * np.cos(2.0 * np.pi * u2)
    z_comm = radius * np.sin(2.0 * np.pi * u2)
    comp = np.exp(COMP_SIGMA * z_comp - COMP_SIGMA**2 / 2.0)
    comm = np.exp(COMM_SIGMA * z_comm - COMM_SIGMA**2 / 2.0)
    return comp, comm


# -- synthetic trace -------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticTrace:
    """Synthetic diurnal availability and capacity trace (see the module docstring)."""

    seed: int = 0
    num_devices: int = 136_000
    rate_per_s: float = 3.0
    horizon_s: float = 5 * DAY_S
    chunk_s: float = CHUNK_S
    diurnal_amplitude: float = DIURNAL_AMPLITUDE
    peak_s: float = PEAK_S
    window_median_s: float = WINDOW_MEDIAN_S
    window_sigma: float = WINDOW_SIGMA
    window_cap_s: float = WINDOW_CAP_S
    num_profiles: int = NUM_PROFILES
    name: str = field(default="", compare=False)
    _starts: list[int] = field(default_factory=list, init=False, repr=False, compare=False)
    _comp: np.ndarray = field(init=False, repr=False, compare=False)
    _comm: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.seed < 0 or self.num_devices <= 0 or self.num_profiles <= 0:
            raise ValueError("seed must be >= 0, num_devices and num_profiles > 0")
        if self.rate_per_s <= 0 or self.chunk_s <= 0 or not 0 <= self.diurnal_amplitude < 1:
            raise ValueError("rate_per_s, chunk_s must be > 0 and diurnal_amplitude in [0,1)")
        peak_rate = self.rate_per_s * (1.0 + self.diurnal_amplitude)
        # 10% margin: Poisson counts over num_devices arrivals vary by ~1/sqrt(num_devices).
        min_recurrence = 0.9 * self.num_devices / peak_rate
        if not WINDOW_MIN_S < self.window_cap_s < min_recurrence:
            raise ValueError(
                f"window_cap_s={self.window_cap_s} must be below {min_recurrence:.0f} s, the "
                "shortest return time of a device, or its windows could overlap"
            )
        if not self.name:
            object.__setattr__(self, "name", f"synthetic(seed={self.seed})")
        comp, comm = synthetic_capacity(np.arange(self.num_devices), self.seed)
        object.__setattr__(self, "_comp", comp)
        object.__setattr__(self, "_comm", comm)

    def cumulative_rate(self, t: np.ndarray | float) -> np.ndarray:
        """Expected number of check-ins in ``[0, t)``: the integral of the diurnal rate."""
        t = np.asarray(t, dtype=np.float64)
        w = 2.0 * np.pi / DAY_S
        wave = np.sin(w * (t - self.peak_s)) - np.sin(w * (0.0 - self.peak_s))
        return self.rate_per_s * (t + self.diurnal_amplitude * wave / w)

    def rate(self, t: np.ndarray | float) -> np.ndarray:
        """Instantaneous check-in rate (per second) at trace time ``t``."""
        t = np.asarray(t, dtype=np.float64)
        phase = 2.0 * np.pi * (t - self.peak_s) / DAY_S
        return self.rate_per_s * (1.0 + self.diurnal_amplitude * np.cos(phase))

    def _expected(self, k: int) -> float:
        a, b = k * self.chunk_s, (k + 1) * self.chunk_s
        return float(self.cumulative_rate(b) - self.cumulative_rate(a))

    def _offset(self, k: int) -> int:
        # The count is the first draw of chunk j's own RNG, so offsets need no other state.
        starts = self._starts  # starts[j] = check-ins before chunk j
        if not starts:
            starts.append(0)
        while len(starts) <= k:
            j = len(starts) - 1
            starts.append(starts[j] + int(_chunk_rng(self.seed, j).poisson(self._expected(j))))
        return starts[k]

    def chunk(self, k: int) -> CheckinBatch:
        """All check-ins of chunk ``k`` (trace time ``[k*chunk_s, (k+1)*chunk_s)``).

        Ignores the horizon; depends only on ``seed``, ``k`` and the parameters.
        """
        rng = _chunk_rng(self.seed, k)
        a = k * self.chunk_s
        expected = self._expected(k)
        n = int(rng.poisson(expected))
        # Inverse-CDF sampling of the rate on a 1-minute grid, exact at the grid points.
        grid = np.linspace(a, a + self.chunk_s, max(2, int(self.chunk_s // 60) + 1))
        cum = self.cumulative_rate(grid) - self.cumulative_rate(a)
        time = np.sort(np.interp(rng.uniform(0.0, expected, n), cum, grid))
        durations = self.window_median_s * np.exp(self.window_sigma * rng.standard_normal(n))
        np.clip(durations, WINDOW_MIN_S, self.window_cap_s, out=durations)
        noise = rng.uniform(0.0, NOISE_MAX_S, n)
        u = rng.random(n)
        device = (self._offset(k) + np.arange(n, dtype=np.int64)) % self.num_devices
        return CheckinBatch(
            time=time,
            end=time + durations,
            device_id=device,
            profile=(device % self.num_profiles).astype(np.int32),
            comp=self._comp[device],
            comm=self._comm[device],
            noise=noise,
            u=u,
        )

    def chunks(self, start: float = 0.0, end: float = math.inf) -> Iterator[CheckinBatch]:
        """Stream check-ins with ``start <= time < min(end, horizon_s)``, chunk by chunk."""
        stop = min(end, self.horizon_s)
        if stop <= start:
            return
        first = max(0, math.floor(max(start, 0.0) / self.chunk_s))
        last = math.ceil(stop / self.chunk_s)
        for k in range(first, last):
            batch = self.chunk(k)
            lo, hi = np.searchsorted(batch.time, [start, stop], side="left")
            if hi > lo:
                yield batch.slice(int(lo), int(hi))


# -- replay ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayedTrace:
    """Replays ``inner``'s ``[0, period_s)`` window ``repeats`` times, back to back.

    Device ids are unchanged. With ``clip_windows`` (default) a window is cut at the end
    of its repeat, so a device's windows never overlap across repeats.
    """

    inner: CheckinSource
    period_s: float
    repeats: int
    clip_windows: bool = True
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.repeats < 0:
            raise ValueError("period_s must be > 0 and repeats >= 0")
        if not self.name:
            object.__setattr__(self, "name", f"{self.inner.name}x{self.repeats}")

    @property
    def horizon_s(self) -> float:
        """End of the last repeat."""
        return self.period_s * self.repeats

    def chunks(self, start: float = 0.0, end: float = math.inf) -> Iterator[CheckinBatch]:
        """Stream the replayed check-ins with ``start <= time < end``."""
        for r in range(self.repeats):
            offset = r * self.period_s
            lo, hi = max(start - offset, 0.0), min(end - offset, self.period_s)
            if lo >= hi:
                continue
            for batch in self.inner.chunks(lo, hi):
                out = batch.shifted(offset)
                if self.clip_windows:
                    out = replace(out, end=np.minimum(out.end, offset + self.period_s))
                yield out


# -- FedScale formats --------------------------------------------------------------------


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _csv_layout(path: Path, names: Sequence[str]) -> tuple[int, tuple[int, ...]]:
    """Rows to skip and the column positions of ``names`` in a small CSV dialect.

    With a header, columns are found by name (case-insensitive); without one, the last
    ``len(names)`` columns are taken (a leading pandas index column is skipped).
    """
    with path.open() as fh:
        first = fh.readline().strip()
    tokens = [t.strip().strip('"').lower() for t in first.split(",")]
    if all(_is_number(t) for t in tokens if t):
        if len(tokens) < len(names):
            raise ValueError(f"{path}: expected at least {len(names)} columns")
        return 0, tuple(range(len(tokens) - len(names), len(tokens)))
    try:
        return 1, tuple(tokens.index(n.lower()) for n in names)
    except ValueError as exc:
        raise ValueError(f"{path}: header {first!r} lacks one of {list(names)}") from exc


def _load_columns(path: Path, names: Sequence[str]) -> np.ndarray:
    skip, cols = _csv_layout(path, names)
    data = np.loadtxt(path, delimiter=",", skiprows=skip, usecols=cols, ndmin=2)
    return data.reshape(-1, len(names))


def read_capacity(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FedScale device capacity as sorted ``(ids, computation ms/sample, communication kbps)``.

    Accepts JSON ``{id: {"computation": ms, "communication": kbps}}`` or CSV
    ``id,computation,communication`` (header optional).
    """
    path = Path(path)
    if path.suffix.lower() == ".json":
        with path.open() as fh:
            raw = json.load(fh)
        ids = np.array([int(k) for k in raw], dtype=np.int64)
        comp = np.array([float(v["computation"]) for v in raw.values()], dtype=np.float64)
        comm = np.array([float(v["communication"]) for v in raw.values()], dtype=np.float64)
    else:
        data = _load_columns(path, ("id", "computation", "communication"))
        ids, comp, comm = data[:, 0].astype(np.int64), data[:, 1], data[:, 2]
    order = np.argsort(ids, kind="stable")
    return ids[order], comp[order], comm[order]


def _keep_disjoint(ids: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Mask of intervals kept: per ID, by start, keep one iff it starts at or after the
    end of the last kept interval of that ID (greedy); drop empty intervals."""
    keep = np.zeros(len(ids), dtype=bool)
    valid = np.flatnonzero(end > start)
    n = len(valid)
    if n == 0:
        return keep
    # Integer ranks of all instants keep order and equality exactly, so (group, time)
    # folds into one sortable int64 key without float rounding; two argsorts on int keys
    # are several times faster than np.lexsort on floats.
    _, rank = np.unique(np.concatenate([start[valid], end[valid]]), return_inverse=True)
    width = np.int64(rank.max()) + 1
    by_time = np.argsort(rank[:n] * width + rank[n:], kind="stable")
    local = by_time[np.argsort(ids[valid][by_time], kind="stable")]
    order = valid[local]
    s_ids = ids[order]
    head = np.r_[True, s_ids[1:] != s_ids[:-1]]
    group = np.cumsum(head) - 1
    key_start = group * width + rank[:n][local]
    key_end = group * width + rank[n:][local]
    group_stop = np.r_[np.flatnonzero(head)[1:], n][group]
    # The greedy successor of a kept interval: the first of its ID starting at/after its end.
    successor = np.searchsorted(key_start, key_end, side="left")
    successor[successor >= group_stop] = -1
    kept = np.zeros(n, dtype=bool)
    frontier = np.flatnonzero(head)
    while frontier.size:
        kept[frontier] = True
        frontier = successor[frontier]
        frontier = frontier[frontier >= 0]
    keep[order[kept]] = True
    return keep


def _chunk_rng(seed: int, k: int) -> np.random.Generator:
    # SeedSequence takes no negative entries; times before 0 get a distinct 3-word key.
    return np.random.default_rng([seed, k] if k >= 0 else [seed, 1, -k])


@dataclass(frozen=True)
class FedScaleTrace:
    """A real availability trace (FedScale format) held as sorted numpy columns.

    Rows with ``end <= start`` are dropped, and so is any interval that overlaps an
    earlier kept interval of the same ID (walking each ID's intervals by start). Profile
    of interval ``i`` (its data-row position in the CSV) is ``i % 959`` as in the
    reference simulator. ``noise`` and ``u`` are drawn per chunk from
    ``default_rng([seed, k])``, so they do not depend on the requested range.
    """

    time: np.ndarray
    end: np.ndarray
    device_id: np.ndarray
    profile: np.ndarray
    capacity_index: np.ndarray  # row -> index into comp_by_device / comm_by_device
    comp_by_device: np.ndarray
    comm_by_device: np.ndarray
    seed: int = 0
    chunk_s: float = CHUNK_S
    horizon_s: float = math.inf
    name: str = "fedscale"

    @classmethod
    def from_arrays(
        cls,
        device_id: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        capacity: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        seed: int = 0,
        num_profiles: int = NUM_PROFILES,
        name: str = "fedscale",
    ) -> FedScaleTrace:
        """Build from interval columns (row order = CSV order) and optional capacity."""
        ids = np.asarray(device_id, dtype=np.int64)
        start = np.asarray(start, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        rows = np.flatnonzero(_keep_disjoint(ids, start, end))
        rows = rows[np.argsort(ids[rows], kind="stable")]
        rows = rows[np.argsort(start[rows], kind="stable")]
        uniq, inverse = np.unique(ids[rows], return_inverse=True)
        comp, comm = synthetic_capacity(uniq, seed)
        if capacity is not None:
            cap_ids, cap_comp, cap_comm = capacity
            if len(cap_ids):
                pos = np.minimum(np.searchsorted(cap_ids, uniq), len(cap_ids) - 1)
                found = (cap_ids[pos] == uniq) & (cap_comp[pos] > 0) & (cap_comm[pos] > 0)
                comp[found] = cap_comp[pos[found]] / FLEET_MEAN_COMP_MS
                comm[found] = cap_comm[pos[found]] / FLEET_MEAN_COMM_KBPS
        return cls(
            time=start[rows],
            end=end[rows],
            device_id=ids[rows],
            profile=(rows % num_profiles).astype(np.int32),
            capacity_index=inverse.astype(np.int64).reshape(-1),
            comp_by_device=comp,
            comm_by_device=comm,
            seed=seed,
            name=name,
        )

    @classmethod
    def from_files(
        cls,
        availability_csv: str | Path,
        capacity_file: str | Path | None = None,
        seed: int = 0,
    ) -> FedScaleTrace:
        """Load ``,ID,start,end`` (or ``ID,start,end``) rows and optional capacity.

        Capacity is FedScale's JSON or an ``id,computation,communication`` CSV; devices
        missing from it (or all, without it) get :func:`synthetic_capacity`.
        """
        path = Path(availability_csv)
        data = _load_columns(path, ("id", "start", "end"))
        capacity = read_capacity(capacity_file) if capacity_file is not None else None
        return cls.from_arrays(
            data[:, 0], data[:, 1], data[:, 2], capacity, seed=seed, name=f"fedscale:{path.name}"
        )

    def __len__(self) -> int:
        return int(self.time.shape[0])

    def chunks(self, start: float = 0.0, end: float = math.inf) -> Iterator[CheckinBatch]:
        """Stream intervals with ``start <= time < min(end, horizon_s)`` in chunks."""
        stop = min(end, self.horizon_s)
        pos = int(np.searchsorted(self.time, start, side="left"))
        n = len(self)
        while pos < n and self.time[pos] < stop:
            k = math.floor(self.time[pos] / self.chunk_s)
            lo = int(np.searchsorted(self.time, k * self.chunk_s, side="left"))
            hi = int(np.searchsorted(self.time, (k + 1) * self.chunk_s, side="left"))
            rng = _chunk_rng(self.seed, k)
            noise = rng.uniform(0.0, NOISE_MAX_S, hi - lo)
            u = rng.random(hi - lo)
            j = min(hi, int(np.searchsorted(self.time, stop, side="left")))
            a, b = pos - lo, j - lo
            cap = self.capacity_index[pos:j]
            yield CheckinBatch(
                time=self.time[pos:j],
                end=self.end[pos:j],
                device_id=self.device_id[pos:j],
                profile=self.profile[pos:j],
                comp=self.comp_by_device[cap],
                comm=self.comm_by_device[cap],
                noise=noise[a:b],
                u=u[a:b],
            )
            pos = hi


def load_trace(
    spec: str,
    seed: int = 0,
    horizon_s: float = 5 * DAY_S,
    *,
    capacity_file: str | Path | None = None,
    period_s: float | None = None,
) -> CheckinSource:
    """A check-in source from ``"synthetic"`` or the path of a FedScale availability CSV.

    With ``period_s`` the source's ``[0, period_s)`` is replayed to cover ``horizon_s``
    (the paper cuts the week to 5 days and replays it NUM_WEEK times); otherwise the
    source stops at ``horizon_s``.
    """
    span = horizon_s if period_s is None else period_s
    source: SyntheticTrace | FedScaleTrace
    if spec == "synthetic":
        source = SyntheticTrace(seed=seed, horizon_s=span)
    else:
        source = FedScaleTrace.from_files(spec, capacity_file, seed=seed)
        source = replace(source, horizon_s=span)
    if period_s is None:
        return source
    return ReplayedTrace(source, period_s, max(1, math.ceil(horizon_s / period_s)))
