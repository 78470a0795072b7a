"""Lease messages as events on venn.leases: every core message survives the wire, a copy
has the same id, and each kind goes where it must (a check-in partition, an owner by job
id, a device's partition by device id)."""

from __future__ import annotations

import pytest

from services.scheduler.leases import from_event, release_event, to_event
from venn import events as ev
from venn.broker import topics
from venn.broker.publish import message
from venn.core.lease import Answer, Grant, Message, Offer, Recall, Report

MESSAGES: list[Message] = [
    Grant("j1", 2, 5, 17),
    Recall("j1", 2, 5, 17),
    Answer("j1", 2, 5, 3, True),
    Answer("j1", 2, 5, 4, False),
    Report("j1", 2, 5, 9, 4),
    Offer("j1", 2, 5, 3),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip_and_routing(msg: Message) -> None:
    event = to_event(msg, 10.0)
    key, value = message(topics.LEASES, event)
    back = ev.decode(value, ev.ALLOWED_ON[topics.LEASES])
    assert isinstance(back, ev.LeaseMessage)
    assert from_event(back) == msg
    assert key == b"j1"
    to_partition = isinstance(msg, Grant | Recall | Answer)
    assert ev.addressed_partition(back) == (5 if to_partition else None)
    assert to_event(msg, 99.0).event_id == event.event_id  # a copy is a duplicate


def test_distinct_content_has_distinct_ids() -> None:
    ids = {to_event(m, 1.0).event_id for m in MESSAGES}
    assert len(ids) == len(MESSAGES)


def test_a_release_goes_to_the_devices_partition() -> None:
    event = release_event("dev-7", "j1", 2, 10.0)
    key, value = message(topics.LEASES, event)
    assert key == b"dev-7"
    assert ev.addressed_partition(ev.decode(value)) is None
    with pytest.raises(ValueError):
        from_event(event)
