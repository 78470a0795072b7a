"""What the ServerApp side and the ClientApp side of venn-flower say to each other inside
Flower messages.

- Every train/evaluate message of a Venn round carries a ConfigRecord ``venn`` with the
  Venn job and round the node was assigned to. `venn_mod` takes it off before the app sees
  the message, and puts its own ``venn`` record on the reply (it ran; whether the launcher
  took the task's end), which `VennStrategy` takes off before the wrapped strategy
  aggregates.
- A ``query.venn`` message asks a node for its profile (name and attributes); `venn_mod`
  answers it. Used only when Venn is unreachable and the run falls back to sampling the
  eligible nodes itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import ConfigRecord, ConfigRecordValues, Error, Message, RecordDict

from venn_flower.profile import NodeProfile

RECORD = "venn"
QUERY_TYPE = "query.venn"
JOB_KEY = "job-id"
ROUND_KEY = "round-index"
DEVICE_KEY = "device-id"
ATTR_PREFIX = "attr."
MOD_KEY = "mod"
REPORTED_KEY = "reported"
STALE_CODE = 9701
"""Error code of a reply refused because the node was given to another round since."""


@dataclass(frozen=True)
class RoundTag:
    """The Venn round a message belongs to."""

    job_id: str
    round_index: int


def tag(message: Message, round_tag: RoundTag) -> None:
    """Mark ``message`` as work of this Venn round."""
    message.content[RECORD] = ConfigRecord(
        {JOB_KEY: round_tag.job_id, ROUND_KEY: round_tag.round_index}
    )


def tag_of(message: Message) -> RoundTag | None:
    """The Venn round a received message belongs to, or None (not Venn's work)."""
    if not message.has_content() or RECORD not in message.content.config_records:
        return None
    record = message.content.config_records[RECORD]
    job_id, round_index = record.get(JOB_KEY), record.get(ROUND_KEY)
    if not isinstance(job_id, str) or not isinstance(round_index, int):
        return None
    return RoundTag(job_id, round_index)


def untag(message: Message) -> None:
    """Take the ``venn`` record off a message (the app sees only its own records)."""
    if message.has_content() and RECORD in message.content:
        del message.content[RECORD]


def mark_reply(reply: Message, reported: bool) -> None:
    """Say on a reply that `venn_mod` ran, and whether the launcher took the task's end."""
    if reply.has_content():
        reply.content[RECORD] = ConfigRecord({MOD_KEY: 1, REPORTED_KEY: int(reported)})


def reply_mark(reply: Message) -> tuple[bool, bool]:
    """(venn_mod ran, its launcher took the task's end) for a reply; takes the mark off."""
    if reply.has_error() or RECORD not in reply.content.config_records:
        return False, False
    record = reply.content.config_records[RECORD]
    del reply.content[RECORD]
    return bool(record.get(MOD_KEY)), bool(record.get(REPORTED_KEY))


def stale_reply(message: Message, reason: str) -> Message:
    """The error reply of a task the node no longer holds."""
    return Message(Error(code=STALE_CODE, reason=reason), reply_to=message)


def profile_query(node_id: int) -> Message:
    """The question "what are you?" for one node."""
    return Message(RecordDict(), message_type=QUERY_TYPE, dst_node_id=node_id)


def profile_answer(query: Message, profile: NodeProfile) -> Message:
    """A node's reply to `profile_query`."""
    values: dict[str, ConfigRecordValues] = {DEVICE_KEY: profile.device_id}
    values.update({f"{ATTR_PREFIX}{k}": float(v) for k, v in profile.attrs.items()})
    return Message(RecordDict({RECORD: ConfigRecord(values)}), reply_to=query)


def profile_of(reply: Message) -> NodeProfile | None:
    """The profile in a reply to `profile_query`, or None (an error, or no venn_mod)."""
    if reply.has_error() or RECORD not in reply.content.config_records:
        return None
    record = reply.content.config_records[RECORD]
    name = record.get(DEVICE_KEY)
    if not isinstance(name, str) or not name:
        return None
    attrs = {
        k[len(ATTR_PREFIX) :]: float(v)  # type: ignore[arg-type]
        for k, v in record.items()
        if k.startswith(ATTR_PREFIX) and isinstance(v, int | float)
    }
    return NodeProfile(name, attrs)
