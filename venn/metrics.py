"""Prometheus exposition shared by the services: a service's counters dataclass becomes
``venn_<service>_<field>_total`` counters without a second copy of each count."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4"


class StatsCollector(Collector):
    """The integer fields of ``stats()`` (a dataclass) as counters, the values of
    ``gauges()`` as gauges."""

    def __init__(
        self,
        prefix: str,
        stats: Callable[[], Any],
        gauges: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.prefix = prefix
        self.stats = stats
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        for field in dataclasses.fields(stats):
            value = getattr(stats, field.name)
            if isinstance(value, int) and not isinstance(value, bool):
                name = f"{self.prefix}_{field.name}"
                yield CounterMetricFamily(name, field.name.replace("_", " "), value=value)
        for name, value in (self.gauges() if self.gauges else {}).items():
            yield GaugeMetricFamily(f"{self.prefix}_{name}", name.replace("_", " "), value=value)


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
