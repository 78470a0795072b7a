import asyncio

import pytest

from tests import factories
from venn import events as ev
from venn.broker import topics
from venn.broker.publish import (
    MemoryEvents,
    NotAllowedOnTopic,
    dead_letter,
    message,
    publish_dead_letter,
)

NOW = 1000.0


def checkin() -> ev.DeviceCheckin:
    return factories.checkin("dev-1", {"ram": 4.0}, bandwidth_kbps=1000.0, event_id="c1", time=NOW)


def test_the_key_is_the_events_partition_key_and_the_value_its_json() -> None:
    key, value = message(topics.CHECKINS, checkin())
    assert key == b"dev-1"
    assert ev.decode(value) == checkin()
    request = ev.RoundRequested(event_id="rr", time=NOW, job_id="j", round_index=0, demand=3)
    assert message(topics.JOBS, request)[0] == b"j"


def test_an_event_the_topic_does_not_carry_is_refused() -> None:
    with pytest.raises(NotAllowedOnTopic, match=r"venn\.jobs"):
        message(topics.JOBS, checkin())


def test_one_dead_letter_policy_keyed_by_the_records_position() -> None:
    raw = b"\x00" + b"x" * 100_000
    letter = dead_letter(raw, "not JSON", topics.JOBS, 2, 17, now=NOW)
    assert letter.event_id == "dead:venn.jobs:2:17"
    assert letter.original_size == len(raw) and len(letter.original) < len(raw)
    key, _ = message(topics.DEAD_LETTERS, letter)
    assert key == b"dead:venn.jobs:2:17"  # the same bad record always gives the same letter

    events = MemoryEvents()

    async def publish() -> None:
        done = await publish_dead_letter(events, raw, "not JSON", topics.JOBS, 2, 17)
        assert done.done()

    asyncio.run(publish())
    ((topic, key, published),) = events.published
    assert (topic, key) == (topics.DEAD_LETTERS, b"dead:venn.jobs:2:17")
    assert isinstance(published, ev.DeadLetter) and published.reason == "not JSON"
    assert events.on(topics.DEAD_LETTERS) == [published]
