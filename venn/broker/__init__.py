"""Kafka-side plumbing: the local brokers (Apache Kafka, Tansu) and the topic catalogue."""

from venn.broker.kafka import KafkaBroker, kafka_version
from venn.broker.local import local_broker, resolve_kind, start_detached, stop_detached
from venn.broker.tansu import TansuBroker, tansu_binary
from venn.broker.topics import ALL_TOPICS, delete_topics, ensure_topics

__all__ = [
    "ALL_TOPICS",
    "KafkaBroker",
    "TansuBroker",
    "delete_topics",
    "ensure_topics",
    "kafka_version",
    "local_broker",
    "resolve_kind",
    "start_detached",
    "stop_detached",
    "tansu_binary",
]
