"""Kafka-side plumbing: the embedded Tansu broker and the topic catalogue."""

from venn.broker.embedded import EmbeddedBroker, start_detached, stop_detached, tansu_binary
from venn.broker.topics import ALL_TOPICS, delete_topics, ensure_topics

__all__ = [
    "ALL_TOPICS",
    "EmbeddedBroker",
    "delete_topics",
    "ensure_topics",
    "start_detached",
    "stop_detached",
    "tansu_binary",
]
