"""Prometheus exposition shared by the services: a service's counters dataclass becomes
``venn_<service>_<field>_total`` counters without a second copy of each count.

A field may also be a mapping from label values to a number: declare its label names (and,
for a level rather than a count, ``kind="gauge"``) with :func:`labelled`, e.g.
``dead_letter_reasons: dict[str, int] = field(default_factory=dict,
metadata=labelled("reason"))`` is exposed as
``venn_<service>_dead_letter_reasons_total{reason="..."}``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4"


def labelled(*labels: str, kind: str = "counter") -> dict[str, Any]:
    """The metadata of a stats field holding one number per label set, ``{label value(s):
    number}`` (the key a string for one label, a tuple of strings for several):
    ``field(default_factory=dict, metadata=labelled("reason"))``."""
    assert kind in ("counter", "gauge") and labels
    return {"labels": labels, "kind": kind}


class StatsCollector(Collector):
    """The integer fields of ``stats()`` (a dataclass) as counters, its :func:`labelled`
    fields as labelled counters or gauges, the values of ``gauges()`` as gauges."""

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
            name = f"{self.prefix}_{field.name}"
            doc = field.name.replace("_", " ")
            if isinstance(value, int) and not isinstance(value, bool):
                yield CounterMetricFamily(name, doc, value=value)
            elif "labels" in field.metadata and isinstance(value, dict):
                labels = list(field.metadata["labels"])
                family: CounterMetricFamily | GaugeMetricFamily
                if field.metadata["kind"] == "gauge":
                    family = GaugeMetricFamily(name, doc, labels=labels)
                else:
                    family = CounterMetricFamily(name, doc, labels=labels)
                for key, number in sorted(value.items()):
                    values = [str(k) for k in key] if isinstance(key, tuple) else [str(key)]
                    family.add_metric(values, float(number))
                yield family
        for gauge, level in (self.gauges() if self.gauges else {}).items():
            yield GaugeMetricFamily(f"{self.prefix}_{gauge}", gauge.replace("_", " "), value=level)


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


async def consumer_lag(consumer: AIOKafkaConsumer) -> dict[tuple[str, str], int]:
    """(topic, partition) -> records of an assigned partition not read yet (its high
    watermark, as of the last fetch, less the consumer's position); partitions not fetched
    from yet are left out."""
    lag: dict[tuple[str, str], int] = {}
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        if high is None:
            continue
        try:
            position = await consumer.position(tp)
        except Exception:  # revoked meanwhile: the next measurement has it right
            continue
        lag[(tp.topic, str(tp.partition))] = max(0, high - position)
    return lag
