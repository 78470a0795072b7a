"""Tenant shares on the simulator: each tenant's share of the devices against its weight
over time, and the average JCT against tenant-blind `venn`.

A Table 1 workload (rounds and arrival gaps x0.1) is dealt to the tenants in arrival order
(job i to tenant i mod n), and run twice on the same trace: with the tenants' weights
(``venn.core.tenants``) and tenant-blind. Tenants *contend* for a device when it is
eligible for the waiting rounds (open, demand left) of more than one tenant at the
moment it is assigned; only such devices count. Each contended device entitles each of
its contenders to its weight over the contenders' weights; a tenant's share of the
contended devices is compared with its entitlement (on devices every tenant contends
for, that is its weight over the sum of weights; the page shows both). Time is cut into
bins for the plot and the per-bin figure. Writes docs/results/tenants.md (between its
markers), docs/results/tenants.png and docs/results/bench/tenants.json.

    python -m bench.tenants_bench --workload even --weights 3 2 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.common import git_commit, preamble
from venn.core.tenants import MIN_OWED, TenantConfig, TenantShare
from venn.sim.engine import SimConfig, SimRun, Simulation
from venn.sim.runner import DAY_S, horizon_of, scale_jobs, scaled_horizon, tier_model, trace_for
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "bench" / "tenants.json"
PAGE = ROOT / "docs" / "results" / "tenants.md"
PLOT = ROOT / "docs" / "results" / "tenants.png"
BEGIN, END = "<!-- tenants:begin -->", "<!-- tenants:end -->"
SHARE_GOAL = 0.10  # relative error of a tenant's share in contended bins
STANDING_S = 3600.0  # how often the decayed standing is sampled
JCT_GOAL = 0.05  # average JCT over tenant-blind venn


class ShareProbe(Simulation):
    """A simulation that files every device it assigns by time bin, tenant and the set
    of tenants whose waiting rounds the device was eligible for (its contenders)."""

    def __init__(self, *args: Any, names: list[str], bin_s: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.names = names
        self.bin_s = bin_s
        n = len(names)
        # [bin, contender set (bit mask), tenant] -> devices assigned
        self.counts = np.zeros((0, 1 << n, n), dtype=np.int64)
        self._masks: tuple[int, np.ndarray] = (-1, np.zeros(0, dtype=np.int64))
        # Every STANDING_S of simulated time: each tenant's decayed use over what it was
        # owed (the standing the layer judges), for the tenants owed a device or more.
        self.standing: list[dict[str, float]] = []
        self._next_sample = STANDING_S

    def sample_standing(self) -> None:
        ledger = self.sched.ledger
        while ledger is not None and self.now >= self._next_sample:
            self._next_sample += STANDING_S
            row = {
                t: ledger.used.get(t, 0.0) / due - 1
                for t, due in ledger.owed.items()
                if due >= MIN_OWED
            }
            if len(row) > 1:
                self.standing.append(row)

    def contenders(self) -> np.ndarray:
        """Per signature, the bit mask of the tenants with a waiting round eligible
        for it (the scheduler's state as of its last compile)."""
        sched = self.sched
        if self._masks[0] != sched.compiles:
            m = sched.index.signature_matrix
            mask = np.zeros(m.shape[0], dtype=np.int64)
            for js in sched.jobs.values():
                if js.round_open and js.remaining > 0:
                    bit = 1 << self.names.index(js.spec.tenant)
                    mask |= m[:, js.group].astype(np.int64) * bit
            self._masks = (sched.compiles, mask)
        return self._masks[1]

    def _account(self, p: Any, stop: int, jobs: int) -> int:
        self.sample_standing()
        mask = self.contenders()
        out, _, grouped = p.outputs(len(self._needed_a))
        sig_of = self.sched.index.signature_of_slot
        times = p.batch.time
        for job, kept, _, start in out[:jobs].tolist():
            if kept == 0:
                continue
            t = self.names.index(self.sched.by_idx[job].spec.tenant)
            q = grouped[start : start + kept]
            sigs = sig_of[p.slots[q]]
            m = np.where(sigs < len(mask), mask[np.minimum(sigs, len(mask) - 1)], 0)
            b = (times[q] // self.bin_s).astype(np.int64)
            if b.max() >= self.counts.shape[0]:
                grow = np.zeros((int(b.max()) + 1 - self.counts.shape[0], *self.counts.shape[1:]))
                self.counts = np.concatenate([self.counts, grow.astype(np.int64)])
            np.add.at(self.counts, (b, m, np.full(len(b), t)), 1)
        return super()._account(p, stop, jobs)


def run(
    workload: str,
    jobs: int,
    scale: float,
    names: list[str],
    config: TenantConfig | None,
    bin_s: float,
) -> tuple[SimRun, np.ndarray, float, list[dict[str, float]]]:
    wl = load_workload(workload, jobs=jobs)
    specs = sorted(scale_jobs(wl.jobs, scale, scale), key=lambda j: (j.arrival, j.job_id))
    specs = [dataclasses.replace(j, tenant=names[i % len(names)]) for i, j in enumerate(specs)]
    horizon = horizon_of(wl, "venn", scale)
    cfg = SimConfig(policy="venn", seed=wl.seed, horizon_s=horizon, tenants=config)
    source = trace_for(wl, "synthetic", wl.seed, horizon)
    tiers = tier_model(trace_for(wl, "synthetic", wl.seed, DAY_S), cfg.num_tiers)
    sim = ShareProbe(specs, source, load_device_profiles(), cfg, tiers, names=names, bin_s=bin_s)
    result = sim.run()
    return result, sim.counts, scaled_horizon(wl, scale), sim.standing


def standing_summary(samples: list[dict[str, float]], names: list[str]) -> dict[str, Any]:
    """The decayed standings sampled over a run: per tenant the median of its samples
    and of their absolute value, and the share of samples with every tenant within
    SHARE_GOAL of what it was owed."""
    per = {t: [row[t] for row in samples if t in row] for t in names}
    return {
        "samples": len(samples),
        "median": {t: float(np.median(v)) if v else math.nan for t, v in per.items()},
        "median_abs": {t: float(np.median(np.abs(v))) if v else math.nan for t, v in per.items()},
        "within_goal": float(
            np.mean([max(abs(x) for x in row.values()) <= SHARE_GOAL for row in samples])
        )
        if samples
        else math.nan,
    }


def jct(run: SimRun, horizon: float) -> dict[str, float]:
    done = [j.jct for j in run.jobs if j.jct is not None]
    censored = [
        min(j.jct, horizon - j.spec.arrival) if j.jct is not None else horizon - j.spec.arrival
        for j in run.jobs
    ]
    return {
        "finished": len(done),
        "jobs": len(run.jobs),
        "avg_jct_s": float(np.mean(done)) if done else math.nan,
        "censored_avg_jct_s": float(np.mean(censored)),
    }


def entitlements(weights: list[float]) -> np.ndarray:
    """[contender set, tenant] -> the tenant's entitlement to one device of that set."""
    n = len(weights)
    out = np.zeros((1 << n, n))
    for m in range(1 << n):
        members = [i for i in range(n) if m >> i & 1]
        if len(members) < 2:
            continue  # nobody contends: no entitlement, not counted
        total = sum(weights[i] for i in members)
        for i in members:
            out[m, i] = weights[i] / total
    return out


def shares(
    counts: np.ndarray, names: list[str], weights: list[float], bin_s: float, min_bin: int
) -> dict[str, Any]:
    """Shares of the contended devices against the entitlements, overall and per bin
    (bins with at least ``min_bin`` contended devices)."""
    n = len(names)
    ent = entitlements(weights)
    contended = ent.sum(axis=1) > 0  # contender sets of 2+ tenants
    full = (1 << n) - 1
    per_set = counts.sum(axis=0)  # [set, tenant]
    got = per_set[contended].sum(axis=0).astype(float)
    owed = (per_set[contended].sum(axis=1)[:, None] * ent[contended]).sum(axis=0)
    all_got = per_set[full].astype(float)
    total = float(counts.sum())
    by_bin_got = counts[:, contended, :].sum(axis=1).astype(float)  # [bin, tenant]
    by_bin_owed = np.einsum("bs,st->bt", counts[:, contended, :].sum(axis=2), ent[contended])
    devices = by_bin_got.sum(axis=1)
    ok = devices >= min_bin
    safe = np.maximum(devices, 1)[:, None]
    share_bin = by_bin_got / safe
    owed_bin = by_bin_owed / safe
    err_bin = np.abs(share_bin - owed_bin) / np.maximum(owed_bin, 1e-12)
    target = np.array(weights) / sum(weights)
    return {
        "bin_s": bin_s,
        "edges": (np.arange(counts.shape[0] + 1) * bin_s).tolist(),
        "share": {t: share_bin[:, i].tolist() for i, t in enumerate(names)},
        "entitled": {t: owed_bin[:, i].tolist() for i, t in enumerate(names)},
        "counted_bins": ok.tolist(),
        "target": {t: float(target[i]) for i, t in enumerate(names)},
        "contended_fraction": float(got.sum() / total) if total else math.nan,
        "all_contended_fraction": float(all_got.sum() / total) if total else math.nan,
        "contended_share": {t: float(got[i] / got.sum()) for i, t in enumerate(names)},
        "entitled_share": {t: float(owed[i] / owed.sum()) for i, t in enumerate(names)},
        "contended_rel_error": {
            t: float(got[i] / owed[i] - 1) if owed[i] else math.nan for i, t in enumerate(names)
        },
        "all_contended_share": {t: float(all_got[i] / all_got.sum()) for i, t in enumerate(names)},
        "all_contended_rel_error": {
            t: float(all_got[i] / all_got.sum() / target[i] - 1) for i, t in enumerate(names)
        },
        "bins": int(ok.sum()),
        "bin_within_goal": float(np.mean(err_bin[ok].max(axis=1) <= SHARE_GOAL))
        if ok.any()
        else math.nan,
        "total_share": {
            t: float(counts[..., i].sum() / max(1.0, total)) for i, t in enumerate(names)
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["tenants"]["shares"]
    edges = np.array(s["edges"]) / 3600.0
    mid = (edges[:-1] + edges[1:]) / 2
    ok = np.array(s["counted_bins"], dtype=bool)
    fig, ax = plt.subplots(figsize=(9, 4))
    for t in s["share"]:
        share = np.where(ok, s["share"][t], np.nan)
        owed = np.where(ok, s["entitled"][t], np.nan)
        line = ax.plot(mid, share, marker=".", label=f"{t} (weight share {s['target'][t]:.2f})")
        ax.plot(mid, owed, color=line[0].get_color(), linestyle="--", linewidth=0.8)
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("share of contended devices (dashed: entitled)")
    ax.set_ylim(0, 1)
    ax.set_title(f"Tenant shares, {result['workload']} (rounds x{result['rounds_scale']:g})")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def page_block(result: dict[str, Any]) -> str:
    s = result["tenants"]["shares"]
    a, b = result["tenants"]["jct"], result["blind"]["jct"]
    jct_change = a["avg_jct_s"] / b["avg_jct_s"] - 1
    cens_change = a["censored_avg_jct_s"] / b["censored_avg_jct_s"] - 1
    share_ok = all(abs(v) <= SHARE_GOAL for v in s["contended_rel_error"].values())
    lines = [
        BEGIN,
        f"Generated by `{result['command']}` (commit {result['commit']}, {result['date']}).",
        "",
        f"Workload `{result['workload']}`, {a['jobs']} jobs, rounds and arrival gaps "
        f"x{result['rounds_scale']:g}, tenants {', '.join(s['target'])} with weights "
        f"{', '.join(f'{w:g}' for w in result['weights'])}, half-life of use "
        f"{result['half_life_s']:g} s, "
        + (
            f"order keys times standing^{result['key_exponent']:g}"
            if result["key_exponent"]
            else f"bands, tolerance {result['tolerance']:g}"
        )
        + ". Contended devices "
        f"(eligible for more than one tenant's waiting round when assigned): "
        f"{s['contended_fraction']:.1%} of the devices assigned, "
        f"{s['all_contended_fraction']:.1%} wanted by every tenant.",
        "",
        "| tenant | weight share | entitled share, contended devices | share, contended "
        "devices | relative error | share, devices every tenant wanted | relative error "
        "| share, whole run | tenant-blind: share, contended devices (entitled) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    blind = result["blind"]["shares"]
    for t in s["target"]:
        lines.append(
            f"| {t} | {s['target'][t]:.3f} | {s['entitled_share'][t]:.3f} | "
            f"{s['contended_share'][t]:.3f} | {s['contended_rel_error'][t]:+.1%} | "
            f"{s['all_contended_share'][t]:.3f} | {s['all_contended_rel_error'][t]:+.1%} | "
            f"{s['total_share'][t]:.3f} | {blind['contended_share'][t]:.3f} "
            f"({blind['entitled_share'][t]:.3f}) |"
        )
    st = result["tenants"]["standing"]
    lines += [
        "",
        f"Decayed standing (use over what was owed, each decayed with the half-life; "
        f"sampled every {STANDING_S:g} s while two or more tenants are owed a device): "
        + ", ".join(
            f"{t} median {st['median'][t]:+.1%} (median |error| {st['median_abs'][t]:.1%})"
            for t in s["target"]
        )
        + f"; every tenant within {SHARE_GOAL:.0%} in {st['within_goal']:.0%} of "
        f"{st['samples']} samples.",
    ]
    lines += [
        "",
        f"Bins of {result['bin_s']:g} s with at least {result['min_bin']:,} contended devices: "
        f"{s['bins']}; in {s['bin_within_goal']:.0%} of them every tenant is within "
        f"{SHARE_GOAL:.0%} of its entitled share.",
        "",
        "| run | finished | average JCT s (finished) | censored average JCT s | CPU s |",
        "|---|---|---|---|---|",
        f"| tenant-blind venn | {b['finished']}/{b['jobs']} | {b['avg_jct_s']:,.0f} | "
        f"{b['censored_avg_jct_s']:,.0f} | {result['plain']['cpu_s']:.1f} |",
        f"| venn with tenants | {a['finished']}/{a['jobs']} | {a['avg_jct_s']:,.0f} | "
        f"{a['censored_avg_jct_s']:,.0f} | {result['tenants']['cpu_s']:.1f} |",
        "",
        f"Goals: shares within {SHARE_GOAL:.0%} of the entitled shares on contended "
        f"devices: **{'met' if share_ok else 'not met'}**; average JCT within "
        f"{JCT_GOAL:.0%} of tenant-blind venn: "
        f"**{'met' if abs(jct_change) <= JCT_GOAL else 'not met'}** "
        f"({jct_change:+.1%} finished-only, {cens_change:+.1%} censored).",
        "",
        f"![tenant shares]({result['plot']})",
        END,
    ]
    return "\n".join(lines)


def markers(suffix: str) -> tuple[str, str]:
    """The markers of one run's block (the default run's, or another workload's)."""
    return f"<!-- tenants{suffix}:begin -->", f"<!-- tenants{suffix}:end -->"


def write_page(block: str, suffix: str = "") -> None:
    """Put ``block`` between its markers; another workload's block, new to the page,
    goes right after the default one."""
    head = (
        "# Tenant shares on the simulator\n\n"
        "What `bench/tenants_bench.py` measures and how: its docstring. Everything between "
        "the markers is generated; text outside them is kept.\n\n"
    )
    text = PAGE.read_text() if PAGE.exists() else head + BEGIN + "\n" + END + "\n"
    begin, end = markers(suffix)
    block = block.replace(BEGIN, begin).replace(END, end)
    if begin not in text:
        text = text.replace(END, END + "\n\n" + begin + "\n" + end, 1)
    before, rest = text.split(begin, 1)
    after = rest.split(end, 1)[1]
    PAGE.write_text(before + block + after)


def sweep_block(rows: list[dict[str, Any]], blind: dict[str, Any], meta: dict[str, Any]) -> str:
    """The half-life sweep of one workload: JCT against tenant-blind, and shares."""
    names = list(rows[0]["shares"]["target"])
    lines = [
        f"Generated by `{meta['command']}` (commit {meta['commit']}, {meta['date']}).",
        "",
        f"Workload `{meta['workload']}`, rounds and arrival gaps x{meta['rounds_scale']:g}, "
        f"weights {' / '.join(f'{w:g}' for w in meta['weights'])}, "
        + (
            f"order keys times standing^{meta['key_exponent']:g}"
            if meta["key_exponent"]
            else f"bands, tolerance {meta['tolerance']:g}"
        )
        + f". Tenant-blind `venn`: {blind['finished']}/{blind['jobs']} "
        f"finished, average JCT {blind['avg_jct_s']:,.0f} s (censored "
        f"{blind['censored_avg_jct_s']:,.0f} s). *share error*: each tenant's share of the "
        "contended devices over the whole run against its entitlement; *decayed "
        "standing*: the share of hourly samples in which every tenant's decayed use is "
        f"within {SHARE_GOAL:.0%} of what it was owed, and the largest median |error| of "
        "a tenant.",
        "",
        "| half-life | finished | avg JCT s (finished) | vs blind | censored vs blind | "
        + " | ".join(f"share error {t}" for t in names)
        + " | decayed standing within 10% | largest median abs error | CPU s |",
        "|---|---|---|---|---|" + "---|" * len(names) + "---|---|---|",
    ]
    for r in rows:
        j, sh, st = r["jct"], r["shares"], r["standing"]
        errors = " | ".join(f"{sh['contended_rel_error'][t]:+.1%}" for t in names)
        worst = max(st["median_abs"].values())
        lines.append(
            f"| {_duration(r['half_life_s'])} | {j['finished']}/{j['jobs']} | "
            f"{j['avg_jct_s']:,.0f} | {j['avg_jct_s'] / blind['avg_jct_s'] - 1:+.1%} | "
            f"{j['censored_avg_jct_s'] / blind['censored_avg_jct_s'] - 1:+.1%} | {errors} | "
            f"{st['within_goal']:.0%} | {worst:.1%} | {r['cpu_s']:.1f} |"
        )
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    for unit, size in (("week", 604_800.0), ("day", 86_400.0), ("h", 3600.0)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}" + ("s" if n > 1 and unit != "h" else "")
    return f"{seconds:g} s"


def sweep(args: argparse.Namespace, names: list[str]) -> None:
    """``--half-lives``: one tenant run per half-life against one tenant-blind run."""
    weights = {t: TenantShare(w) for t, w in zip(names, args.weights, strict=True)}
    t0 = time.process_time()
    plain, _, horizon, _ = run(args.workload, args.jobs, args.rounds_scale, names, None, 1e9)
    blind = jct(plain, horizon)
    console = Console()
    console.print("tenant-blind", blind, f"CPU {time.process_time() - t0:.1f} s")
    rows = []
    for h in args.half_lives:
        cfg = TenantConfig(
            weights, half_life_s=h, tolerance=args.tolerance, key_exponent=args.key_exponent
        )
        t0 = time.process_time()
        r, counts, horizon, standing = run(
            args.workload, args.jobs, args.rounds_scale, names, cfg, args.bin_s
        )
        row = {
            "half_life_s": h,
            "jct": jct(r, horizon),
            "shares": shares(counts, names, args.weights, args.bin_s, args.min_bin),
            "standing": standing_summary(standing, names),
            "cpu_s": time.process_time() - t0,
        }
        rows.append(row)
        console.print(
            f"half-life {h:g} s:", row["jct"], row["shares"]["contended_rel_error"],
            f"standing within goal {row['standing']['within_goal']:.0%}",
        )  # fmt: skip
    if args.no_write:
        return
    meta = {
        "workload": args.workload,
        "rounds_scale": args.rounds_scale,
        "weights": args.weights,
        "tolerance": args.tolerance,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d"),
        "command": f"python -m bench.tenants_bench --workload {args.workload} --weights "
        f"{' '.join(f'{w:g}' for w in args.weights)} --half-lives "
        f"{' '.join(f'{h:g}' for h in args.half_lives)}"
        + (f" --key-exponent {args.key_exponent:g}" if args.key_exponent else ""),
        "key_exponent": args.key_exponent,
    }
    out = OUT.with_name(f"tenants-sweep-{args.workload}.json")
    out.write_text(json.dumps({"meta": meta, "blind": blind, "rows": rows}, indent=1) + "\n")
    block = BEGIN + "\n" + sweep_block(rows, blind, meta) + "\n" + END
    write_page(block, f"-sweep-{args.workload}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="even")
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--rounds-scale", type=float, default=0.1)
    ap.add_argument("--weights", type=float, nargs="+", default=[3.0, 2.0, 1.0])
    ap.add_argument("--half-life-s", type=float, default=TenantConfig().half_life_s)
    ap.add_argument("--tolerance", type=float, default=TenantConfig().tolerance)
    ap.add_argument("--key-exponent", type=float, default=TenantConfig().key_exponent)
    ap.add_argument("--bin-s", type=float, default=6 * 3600.0)
    ap.add_argument("--min-bin", type=int, default=1000)
    ap.add_argument(
        "--half-lives",
        type=float,
        nargs="+",
        help="instead: one run per half-life (seconds) against tenant-blind venn, "
        "written as the workload's sweep on the page",
    )
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    preamble("tenants_bench")
    names = [chr(ord("a") + i) for i in range(len(args.weights))]
    if args.half_lives:
        sweep(args, names)
        return
    config = TenantConfig(
        {t: TenantShare(w) for t, w in zip(names, args.weights, strict=True)},
        half_life_s=args.half_life_s,
        tolerance=args.tolerance,
        key_exponent=args.key_exponent,
    )
    # The blind run's shares: a layer that never bands (an infinite tolerance) decides
    # as no tenants at all (tests/pure/test_tenant_policy.py); its JCT is the plain run's.
    blind_cfg = dataclasses.replace(config, tolerance=math.inf, key_exponent=0.0)
    default = args.workload == "even" and args.weights == [3.0, 2.0, 1.0]
    suffix = "" if default else f"-{args.workload}"
    result: dict[str, Any] = {
        "workload": args.workload,
        "rounds_scale": args.rounds_scale,
        "weights": args.weights,
        "half_life_s": args.half_life_s,
        "key_exponent": args.key_exponent,
        "tolerance": args.tolerance,
        "bin_s": args.bin_s,
        "min_bin": args.min_bin,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d"),
        "plot": f"tenants{suffix}.png",
        "command": "python -m bench.tenants_bench --workload "
        f"{args.workload} --weights {' '.join(f'{w:g}' for w in args.weights)}"
        + (f" --key-exponent {args.key_exponent:g}" if args.key_exponent else ""),
    }
    for key, cfg in (("tenants", config), ("blind", blind_cfg), ("plain", None)):
        t0 = time.process_time()
        r, counts, horizon, standing = run(
            args.workload, args.jobs, args.rounds_scale, names, cfg, args.bin_s
        )
        result[key] = {"jct": jct(r, horizon), "cpu_s": time.process_time() - t0}
        if cfg is not None:
            result[key]["shares"] = shares(counts, names, args.weights, args.bin_s, args.min_bin)
            result[key]["standing"] = standing_summary(standing, names)
    # The tenant-blind figures are the plain run's (no tenant layer at all).
    assert result["blind"]["jct"] == result["plain"]["jct"], "a non-banding layer changed decisions"
    table = Table("tenant", "entitled", "contended share", "rel. error", "blind share")
    s, bs = result["tenants"]["shares"], result["blind"]["shares"]
    for t in names:
        table.add_row(
            t,
            f"{s['entitled_share'][t]:.3f}",
            f"{s['contended_share'][t]:.3f}",
            f"{s['contended_rel_error'][t]:+.1%}",
            f"{bs['contended_share'][t]:.3f}",
        )
    console = Console()
    console.print(table)
    console.print(f"bins {s['bins']}, all within goal: {s['bin_within_goal']:.0%}")
    for key in ("plain", "tenants"):
        console.print(key, result[key]["jct"], f"CPU {result[key]['cpu_s']:.1f} s")
    if args.no_write:
        return
    out = OUT.with_name(f"tenants{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, PLOT.with_name(result["plot"]))
    write_page(page_block(result), suffix)


if __name__ == "__main__":
    main()
