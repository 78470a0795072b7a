"""The paper's workloads: YAML files of job templates turned into concrete job lists.

A workload YAML (``even_workload.yml`` and friends) names a template file
(``job_config_file``) holding the job templates and the requirement tiers, and weights the
templates with ``job_id_prob``. Sampling follows paper §5: ``jobs`` jobs, templates drawn
with those weights, the first arrival at 3600 s and exponential inter-arrivals of mean
1800 s, requirement tier ``(i mod 4) + 1`` for job ``i`` unless the workload gives
``eligibility_prob``. Only synchronous jobs are modelled: ``job_type`` is kept on the
template as information.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from venn.core.model import JobSpec, Requirement
from venn.data import DATA_DIR, find_data_file

WORKLOAD_NAMES: tuple[str, ...] = ("even", "small", "large", "low", "high")
TIER_NAMES: dict[int, str] = {
    1: "general",
    2: "compute-rich",
    3: "memory-rich",
    4: "high-performance",
}
tier_names = TIER_NAMES  # the spelling the brief and the CLI use

FIRST_ARRIVAL_S = 3600.0
MEAN_INTERARRIVAL_S = 1800.0
DEFAULT_TEMPLATE_FILE = "job_config_random_eli.yml"


@dataclass(frozen=True)
class JobTemplate:
    """One entry of a template file's ``jobs`` list (``index`` is 0-based)."""

    index: int
    participants: int
    rounds: int
    deadline: float
    workload_s: float = 30.0
    job_type: str = "sync"
    concurrency: int = 0


@dataclass(frozen=True)
class Workload:
    """A sampled workload: its settings and the concrete jobs in arrival order."""

    name: str
    seed: int
    num_days: int
    num_weeks: int
    horizon_s: float
    client_file: Path | None
    jobs: tuple[JobSpec, ...]
    templates: tuple[JobTemplate, ...]
    tier_requirements: Mapping[int, Requirement]
    source: Path


def _read_yaml(path: Path) -> dict[str, Any]:
    with path.open() as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a YAML mapping at top level")
    return data


def resolve_workload_file(name: str, beside: Path | None = None) -> Path | None:
    """Resolve a file named inside a workload YAML by base name.

    Looks first in ``beside`` (the YAML's directory), then in the packaged data;
    returns None when neither has it.
    """
    return find_data_file(name, [beside] if beside is not None else [])


def resolve_workload(name_or_path: str) -> str:
    """A paper workload name, another packaged workload (``demo``) or a YAML path -> what
    `load_workload` accepts."""
    if name_or_path in WORKLOAD_NAMES or Path(name_or_path).is_file():
        return name_or_path
    packaged = DATA_DIR / "workloads" / f"{name_or_path}_workload.yml"
    if packaged.is_file():
        return str(packaged)
    raise FileNotFoundError(f"no workload {name_or_path!r} (a name or a YAML path)")


def _workload_path(name_or_path: str) -> Path:
    if name_or_path in WORKLOAD_NAMES:
        return DATA_DIR / "workloads" / f"{name_or_path}_workload.yml"
    path = Path(name_or_path)
    if path.is_file():
        return path
    raise FileNotFoundError(
        f"unknown workload {name_or_path!r}: use one of {', '.join(WORKLOAD_NAMES)} "
        "or the path of a workload YAML"
    )


def parse_templates(config: Mapping[str, Any]) -> tuple[JobTemplate, ...]:
    """The ``jobs`` list of a template file as :class:`JobTemplate` values."""
    templates = []
    for index, entry in enumerate(config.get("jobs") or []):
        cfg = entry.get("config", entry) if isinstance(entry, Mapping) else None
        if not isinstance(cfg, Mapping):
            raise ValueError(f"job template {index + 1}: expected a mapping")
        templates.append(
            JobTemplate(
                index=index,
                participants=int(cfg["participants"]),
                rounds=int(cfg["rounds"]),
                deadline=float(cfg["deadline"]),
                workload_s=float(cfg.get("workload", 30.0)),
                job_type=str(cfg.get("job_type", "sync")),
                concurrency=int(cfg.get("concurrency", 0) or 0),
            )
        )
    return tuple(templates)


def parse_tier_requirements(config: Mapping[str, Any]) -> dict[int, Requirement]:
    """The ``job_requirement`` list of a template file as ``{tier (1-based): Requirement}``."""
    tiers: dict[int, Requirement] = {}
    for index, entry in enumerate(config.get("job_requirement") or []):
        thresholds = entry.get("eligibility", entry) if isinstance(entry, Mapping) else None
        if not isinstance(thresholds, Mapping):
            raise ValueError(f"job_requirement {index + 1}: expected a mapping")
        tiers[index + 1] = Requirement.of({str(k): float(v) for k, v in thresholds.items()})
    return tiers


def tier_requirements(template_file: str | Path | None = None) -> dict[int, Requirement]:
    """The requirement tiers of a template file (default: the paper's four tiers)."""
    path = Path(template_file) if template_file is not None else None
    if path is None or not path.is_file():
        found = find_data_file(str(template_file or DEFAULT_TEMPLATE_FILE))
        if found is None:
            raise FileNotFoundError(f"template file {template_file!r} not found")
        path = found
    tiers = parse_tier_requirements(_read_yaml(path))
    if not tiers:
        raise ValueError(f"{path}: no job_requirement tiers")
    return tiers


def _probabilities(weights: Sequence[float], size: int, what: str) -> np.ndarray:
    p = np.asarray(weights, dtype=np.float64)
    if p.shape != (size,):
        raise ValueError(f"{what} has {p.size} entries, expected {size}")
    if (p < 0).any() or p.sum() <= 0:
        raise ValueError(f"{what} must be non-negative with a positive sum")
    return p / p.sum()


def load_workload(name_or_path: str, jobs: int = 50, seed: int | None = None) -> Workload:
    """Load a workload by name (``even``, ``small``, ``large``, ``low``, ``high``) or path.

    Samples ``jobs`` jobs deterministically from ``seed`` (default: the YAML's
    ``RANDOMSEED``). Files named in the YAML resolve by base name beside it, then in the
    packaged data; ``client_file`` becomes None when absent (the FedScale CSV is not
    shipped). Requirements of tiers come from the template file's ``job_requirement``,
    else from the paper's four tiers.
    """
    if jobs < 0:
        raise ValueError("jobs must be >= 0")
    path = _workload_path(name_or_path)
    spec = _read_yaml(path)
    beside = path.resolve().parent

    config: Mapping[str, Any] = spec
    if "job_config_file" in spec:
        config_path = resolve_workload_file(str(spec["job_config_file"]), beside)
        if config_path is None:
            raise FileNotFoundError(f"{path}: job_config_file {spec['job_config_file']!r}")
        config = _read_yaml(config_path)
    templates = parse_templates(config)
    if not templates:
        raise ValueError(f"{path}: no job templates (job_config_file or jobs)")
    tiers = parse_tier_requirements(config) or tier_requirements()

    client_file = None
    if spec.get("client_file"):
        client_file = resolve_workload_file(str(spec["client_file"]), beside)

    run_seed = int(spec.get("RANDOMSEED", 0)) if seed is None else int(seed)
    num_days = int(spec.get("NUM_DAY", 5))
    num_weeks = int(spec.get("NUM_WEEK", 1))
    weights = spec.get("job_id_prob", [1.0] * len(templates))
    template_p = _probabilities(weights, len(templates), "job_id_prob")
    tier_weights = spec.get("eligiblility_prob", spec.get("eligibility_prob"))

    rng = np.random.default_rng(run_seed)
    chosen = rng.choice(len(templates), size=jobs, p=template_p)
    gaps = rng.exponential(MEAN_INTERARRIVAL_S, size=max(jobs - 1, 0))
    arrivals = FIRST_ARRIVAL_S + np.concatenate([[0.0], np.cumsum(gaps)])[:jobs]
    tier_ids = sorted(tiers)
    if tier_weights is not None:
        tier_p = _probabilities(tier_weights, len(tier_ids), "eligibility_prob")
        job_tiers = [tier_ids[k] for k in rng.choice(len(tier_ids), size=jobs, p=tier_p)]
    else:
        job_tiers = [tier_ids[i % len(tier_ids)] for i in range(jobs)]

    specs = []
    for i in range(jobs):
        template = templates[int(chosen[i])]
        specs.append(
            JobSpec(
                job_id=f"job-{i:03d}",
                requirement=tiers[job_tiers[i]],
                demand=template.participants,
                rounds=template.rounds,
                deadline=template.deadline,
                arrival=float(arrivals[i]),
                workload_s=template.workload_s,
                tier=job_tiers[i],
                template=template.index,
            )
        )

    name = path.name.removesuffix(".yml").removesuffix(".yaml").removesuffix("_workload")
    return Workload(
        name=name,
        seed=run_seed,
        num_days=num_days,
        num_weeks=num_weeks,
        horizon_s=float(num_days * num_weeks * 86400),
        client_file=client_file,
        jobs=tuple(specs),
        templates=templates,
        tier_requirements=dict(tiers),
        source=path,
    )
