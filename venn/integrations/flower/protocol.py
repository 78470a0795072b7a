"""What the ServerApp side and the ClientApp side of the adapter say to each other inside
Flower messages.

- Every train/evaluate message of a Venn round carries a ConfigRecord ``venn`` with the
  Venn job and round the node was assigned to; the node's mod reports its result for it.
- A ``query.venn`` message asks a node for its Venn device id (the insecure-mode mapping
  between Flower node ids and Venn device ids); the reply carries it in the same record.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import ConfigRecord, Message, RecordDict

RECORD = "venn"
QUERY_ACTION = "venn"
QUERY_TYPE = f"query.{QUERY_ACTION}"
JOB_KEY = "job-id"
ROUND_KEY = "round-index"
DEVICE_KEY = "device-id"


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


def device_query(node_id: int) -> Message:
    """The question "which Venn device are you?" for one node."""
    return Message(content=RecordDict(), message_type=QUERY_TYPE, dst_node_id=node_id)


def device_answer(query: Message, device_id: str) -> Message:
    """A node's reply to ``device_query``."""
    return Message(RecordDict({RECORD: ConfigRecord({DEVICE_KEY: device_id})}), reply_to=query)


def device_of(reply: Message) -> str | None:
    """The device id in a reply to ``device_query``, or None (an error or another app)."""
    if reply.has_error() or RECORD not in reply.content.config_records:
        return None
    device = reply.content.config_records[RECORD].get(DEVICE_KEY)
    return device if isinstance(device, str) and device else None
