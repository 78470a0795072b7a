"""Every Venn topic name, and their creation (`ensure_topics`; a stack's, with the
scheduler's changelogs, is `venn.broker.prepare.prepare_topics`).

Tansu auto-creates an unknown topic with 4 partitions as soon as anyone produces to it or
asks for its metadata; Faust then crash-loops on a partition mismatch between a table's
source topic and its changelog. So all topics (Faust changelogs included) are created here,
before any service starts, and nothing here asks metadata for a topic by name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import for_code

CHECKINS = "venn.checkins"
"""Device check-ins. Key: device_id."""
JOBS = "venn.jobs"
"""Job registered, round requested, job cancelled. Key: job_id."""
ASSIGNMENTS = "venn.assignments"
"""Scheduler -> coordinators: a device assigned to a job's round. Key: job_id."""
RESULTS = "venn.results"
"""Devices -> coordinators: a device's result or failure for an assignment. Key: job_id."""
ROUNDS = "venn.rounds"
"""Coordinators -> recorder/scheduler: round closed, job finished. Key: job_id."""
DEAD_LETTERS = "venn.dead-letters"
"""Anything malformed: original bytes + reason + source topic/partition/offset."""
REPLIES = "venn.replies"
"""Scheduler -> gateways: the check-ins of a batch that got no assignment, so the gateway
answers retry_after at once instead of waiting out its bound. Key: the batch's reply_to."""

REVOCATIONS = "venn.revocations"
"""Revoked API tokens (key: the token id). Every service that checks tokens follows it from
the beginning; compacted, so a revocation outlives any retention."""

STATUS = "venn.status"
"""Scheduler -> job API and dashboard: a snapshot of the plan and the supply every few
seconds (`venn.core.status`). Key "plan"; compacted, so a reader starts from the latest."""

ENROLMENTS = "venn.enrolments"
"""Gateways to gateways: who enrolled each device id (`DeviceEnrolled`: the owner of the
enrol token), so that no other enrol token takes an enrolled id over. Key: device_id.
Every gateway follows it from the beginning; kept for good and not compacted, because the
first enrolment of an id is the one that counts."""

ALL_TOPICS: tuple[str, ...] = (
    CHECKINS,
    JOBS,
    ASSIGNMENTS,
    RESULTS,
    ROUNDS,
    DEAD_LETTERS,
    REPLIES,
    REVOCATIONS,
    STATUS,
    ENROLMENTS,
)

DEAD_LETTER_OWNER: dict[str, str] = {
    CHECKINS: "scheduler",
    JOBS: "scheduler",
    RESULTS: "scheduler",
    ROUNDS: "scheduler",
    ASSIGNMENTS: "scheduler",
    REPLIES: "scheduler",
    REVOCATIONS: "scheduler",
    STATUS: "scheduler",
    ENROLMENTS: "gateway",
}
"""The one service that dead-letters a malformed record of each topic, so every bad record
gets exactly one dead letter; every other reader skips it and counts it. The scheduler
reads every topic here in its consumer group (venn.replies, venn.status and
venn.revocations only for this), so a record gets its letter once however many gateways,
SDK clients or recorders read it, and whether the gateway it is addressed to is alive or
not (issue 26: a bad reply to no live gateway, and a bad status record, got none). Every
gateway dead-letters a bad enrolment, under the one event id of its position."""

APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
"""The broker stamps each record when it stores it: the time a job event's token is judged
at (`venn.auth.checks`), which no producer can choose."""

COMPACTED = {"cleanup.policy": "compact"}
"""A table: the latest record of each key is what counts, kept however old."""
KEPT = {"retention.ms": "-1"}
"""A log its readers fold from offset 0: every record counts, kept however old. Not
compacted, since a job's later events would remove its registration."""

TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    # Job events (registration, rounds, cancel, heartbeats) and round events are folded from
    # offset 0 by the gateway, the coordinators and the recorder: with the broker's default
    # 7 days' retention a job older than that disappeared after a restart (issue 26).
    JOBS: {**APPEND_TIME, **KEPT},
    ROUNDS: {**APPEND_TIME, **KEPT},
    REVOCATIONS: COMPACTED,
    STATUS: COMPACTED,
    ENROLMENTS: {**KEPT, "retention.bytes": "-1"},
}
"""Topic-level settings given at creation (a changelog's: `topic_config`)."""


def topic_config(name: str) -> dict[str, str]:
    """The settings a topic is created with: `TOPIC_CONFIGS`, and compaction for a Faust
    table's changelog (a table's rows, however old)."""
    if name.endswith(CHANGELOG_SUFFIX):
        return COMPACTED
    return TOPIC_CONFIGS.get(name, {})


_TOPIC_ALREADY_EXISTS = 36
_UNKNOWN_TOPIC = 3


class TopicError(RuntimeError):
    pass


SCHEDULER_TABLES: tuple[str, ...] = ("jobs", "round", "decided")
"""The scheduler's Faust tables (``services.scheduler``): each has a changelog topic, which
must exist, with the inputs' partition count, before a worker starts."""


CHANGELOG_SUFFIX = "-changelog"


def changelog_topic(app_id: str, table: str) -> str:
    """Faust's changelog topic name for `table` of app `app_id`."""
    return f"{app_id}-{table}{CHANGELOG_SUFFIX}"


def scheduler_changelogs(app_id: str) -> list[str]:
    """The changelog topics of the scheduler app ``app_id`` (VENN_APP_ID)."""
    return [changelog_topic(app_id, table) for table in SCHEDULER_TABLES]


def prefixed(prefix: str, names: Iterable[str] = ALL_TOPICS) -> list[str]:
    """Topic names with a prefix, e.g. per-test isolation on a shared broker."""
    return [f"{prefix}{name}" for name in names]


async def default_replication(admin: AIOKafkaAdminClient) -> int:
    """Replicas per partition for a new topic: 3 where the cluster has 3 brokers or more
    (with the local cluster's min.insync.replicas=2, one may fail), else every broker."""
    cluster = await admin.describe_cluster()
    return max(1, min(3, len(cluster.get("brokers", ()))))


async def topic_partitions(admin: AIOKafkaAdminClient) -> dict[str, int]:
    """Partition count of every existing topic (asks for all topics: no auto-creation)."""
    metadata = await admin.describe_topics(None)
    return {t["topic"]: len(t["partitions"]) for t in metadata}


async def partitions_of(
    bootstrap: str, names: Iterable[str], options: Mapping[str, Any] | None = None
) -> list[TopicPartition]:
    """Every partition of the named topics, as the cluster has them now (a consumer's own
    metadata knows only the topics it has fetched metadata for); none of a topic that does
    not exist."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="venn-admin", **dict(options or {})
    )
    await admin.start()
    try:
        counts = await topic_partitions(admin)
    finally:
        await admin.close()
    return [TopicPartition(name, p) for name in names for p in range(counts.get(name, 0))]


async def leaderless(admin: AIOKafkaAdminClient, names: Iterable[str]) -> set[str]:
    """Topics of ``names`` with a partition that has no leader yet (just created)."""
    wanted = set(names)
    metadata = await admin.describe_topics(None)
    return {
        t["topic"]
        for t in metadata
        if t["topic"] in wanted and any(p.get("leader", -1) < 0 for p in t["partitions"])
    }


async def ensure_topics(
    bootstrap: str,
    partitions: int,
    extra: Iterable[str] = (),
    *,
    names: Iterable[str] = ALL_TOPICS,
    timeout: float = 30.0,
    replication: int = 0,
    options: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Create `names` + `extra` (e.g. Faust changelogs) with `partitions` each; idempotent.

    ``replication`` 0 replicates each new topic as ``default_replication`` says.
    Raises TopicError if a topic already exists with another partition count (typically
    auto-created by Tansu before this ran): that cannot be repaired in place.
    Returns {topic: partitions} for the requested topics.
    """
    wanted = list(dict.fromkeys([*names, *extra]))
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="venn-admin", **dict(options or {})
    )
    await admin.start()
    try:
        existing = await topic_partitions(admin)
        missing = [name for name in wanted if name not in existing]
        if missing:
            factor = replication or await default_replication(admin)
            response = await admin.create_topics(
                [
                    NewTopic(
                        name,
                        partitions,
                        replication_factor=factor,
                        topic_configs=topic_config(name),
                    )
                    for name in missing
                ]
            )
            for err in response.to_object()["topic_errors"]:
                code = err["error_code"]
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    exc = for_code(code)
                    raise TopicError(
                        f"creating {err['topic']}: {exc.__name__} {err['error_message']}"
                    )
            # Apache Kafka creates asynchronously: wait until the metadata lists them.
            deadline = time.monotonic() + timeout
            while True:
                existing = await topic_partitions(admin)
                # Listed, and every partition led: the first produce would fail otherwise.
                if all(existing.get(name) for name in wanted) and not await leaderless(
                    admin, missing
                ):
                    break
                if time.monotonic() > deadline:
                    break  # reported below, with the counts seen
                await asyncio.sleep(0.1)
    finally:
        await admin.close()
    result = {name: existing.get(name, 0) for name in wanted}
    wrong = {name: n for name, n in result.items() if n != partitions}
    if wrong:
        raise TopicError(
            f"topics with a partition count other than {partitions}: {wrong}; delete them "
            "(or restart the embedded broker) and start again"
        )
    return result


async def delete_topics(
    bootstrap: str,
    names: Iterable[str],
    timeout: float = 30.0,
    options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Delete topics (missing ones are ignored) and wait until the metadata no longer lists
    them (Apache Kafka deletes asynchronously). Returns the names actually deleted."""
    names = list(names)
    if not names:
        return []
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="venn-admin", **dict(options or {})
    )
    await admin.start()
    try:
        response = await admin.delete_topics(names)
        deleted: list[str] = []
        for err in response.to_object()["topic_error_codes"]:
            code = err["error_code"]
            if code == 0:
                deleted.append(err["topic"])
            elif code != _UNKNOWN_TOPIC:
                raise TopicError(f"deleting {err['topic']}: {for_code(code).__name__}")
        deadline = time.monotonic() + timeout
        while set(deleted) & set(await topic_partitions(admin)):
            if time.monotonic() > deadline:
                raise TopicError(f"topics still listed {timeout} s after deletion: {deleted}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    return deleted
