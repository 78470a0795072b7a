"""Workloads of the paper (Table 1) sampled into concrete job lists."""

from venn.workloads.loader import (
    FIRST_ARRIVAL_S,
    MEAN_INTERARRIVAL_S,
    TIER_NAMES,
    WORKLOAD_NAMES,
    JobTemplate,
    Workload,
    load_workload,
    parse_templates,
    parse_tier_requirements,
    resolve_workload,
    resolve_workload_file,
    tier_names,
    tier_requirements,
)

__all__ = [
    "FIRST_ARRIVAL_S",
    "MEAN_INTERARRIVAL_S",
    "TIER_NAMES",
    "WORKLOAD_NAMES",
    "JobTemplate",
    "Workload",
    "load_workload",
    "parse_templates",
    "parse_tier_requirements",
    "resolve_workload",
    "resolve_workload_file",
    "tier_names",
    "tier_requirements",
]
