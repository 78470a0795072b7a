"""The embedded Apache Kafka's files are its owner's alone (issue 26, item 5): its
server.properties holds the admin's password, its segments hold job tokens."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from venn.broker.topics import delete_topics, ensure_topics


async def test_kafka_config_and_segments_are_owner_only(
    broker: str, broker_kind: str, run_dir: Path
) -> None:
    if broker_kind != "kafka":
        pytest.skip("Tansu keeps its log in memory")
    topic = f"test.private-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, 1, names=(topic,))
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:  # something in a segment
        await producer.send_and_wait(topic, b"a job token, say", key=b"k")
    finally:
        await producer.stop()
    try:
        check_private(run_dir / "broker")
    finally:
        await delete_topics(broker, [topic])


def check_private(home: Path) -> None:
    """Every file of the broker 0600 or stricter, every directory 0700."""
    files = [Path(top) / name for top, _, names in os.walk(home) for name in names]
    props = [f for f in files if f.name == "server.properties"]
    segments = [f for f in files if f.suffix in (".log", ".index") and "data" in f.parts]
    assert props and segments
    open_to_others = {
        str(f): oct(stat.S_IMODE(f.stat().st_mode))
        for f in [*props, *segments]
        if stat.S_IMODE(f.stat().st_mode) & 0o077
    }
    assert not open_to_others
    for top, dirs, _ in os.walk(home):
        for d in dirs:
            mode = stat.S_IMODE((Path(top) / d).stat().st_mode)
            assert not mode & 0o077, (Path(top) / d, oct(mode))
