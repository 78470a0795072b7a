"""Event models (msgspec), their wire encoding and a strict, dead-letter-friendly decoder.

The JSON Schemas in `schemas/<type>.v<N>.json` are the contract; these models are checked
against them in tests/pure/test_events.py. Conventions the tests rely on:
- every field is always encoded; a field whose default is None is optional, all others
  are required in the schema;
- `event_id` is chosen by the producer and must be stable across retries/replays
  (consumers dedupe on it), so it has no default.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from venn.broker import topics
from venn.fields import (
    BATCH_MAX,
    ORIGINAL_PREFIX_MAX,
    TEXT_MAX,
    Attrs,
    Bandwidth,
    Base64,
    CheckinId,
    Count,
    Demand,
    Duration,
    EventId,
    Id,
    Offset,
    Partition,
    PosDuration,
    Priority,
    RoundCount,
    RoundIndex,
    Rounds,
    Sha256,
    Size,
    Speed,
    Text,
    Timestamp,
    Token,
    TopicName,
    Url,
)

SCHEMA_VERSION = 1
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


class Event(
    msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, tag_field="type"
):
    """Base of every event. Subclasses set `tag=<type name>`."""

    version: ClassVar[int] = SCHEMA_VERSION
    """The type's current schema version: what it writes, `schemas/<type>.v<version>.json`.
    A type at version N reads every version up to N (its `schema_version` Literal)."""

    event_id: EventId
    # Decoding rejects other versions; a missing version is read as 1.
    schema_version: Literal[1] = 1
    time: Timestamp

    @classmethod
    def type_name(cls) -> str:
        return str(cls.__struct_config__.tag)


class DeviceCheckin(Event, tag="device_checkin", frozen=True):
    event_id: CheckinId  # shorter: assignment ids embed it
    device_id: Id
    attrs: Attrs
    speed_ms_per_sample: Speed
    bandwidth_kbps: Bandwidth
    observe_only: bool | None = None
    """True: the device was already answered (no open round admitted it): the scheduler
    counts it as supply for its plan and assigns it nothing. Gateways no longer send these
    (they report such check-ins as counts, `SupplyReport`); still read as before."""
    counted: bool | None = None
    """True: the gateway that forwarded it counts it in its supply reports, so the
    scheduler does not count it again."""


class JobRegistered(Event, tag="job_registered", frozen=True, kw_only=True):
    version: ClassVar[int] = 2

    schema_version: Literal[1, 2] = 2  # type: ignore[assignment]
    job_id: Id
    requirement: Attrs
    demand: Demand
    rounds: Rounds
    deadline_s: PosDuration
    workload_s: Duration
    submit_token: Id | None = None
    """Chosen by the client once per submission: a retried registration with the same token
    is a no-op; another registration of the job id (another token) is refused."""
    token: Token | None = None
    """The job owner's API token (required when the deployment authenticates)."""
    tenant: Id | None = None
    """The tenant the job belongs to (v2): the job API stamps its token's owner. None in
    v1 events and without authentication: the default tenant."""
    priority: Priority | None = None
    """Its priority class inside the tenant (v2), higher first; None: 0."""


class RoundRequested(Event, tag="round_requested", frozen=True):
    job_id: Id
    round_index: RoundIndex
    demand: Demand
    token: Token | None = None
    """The job owner's API token (required when the deployment authenticates)."""


class JobCancelled(Event, tag="job_cancelled", frozen=True):
    job_id: Id
    reason: Text
    token: Token | None = None
    """The job owner's API token (required when the deployment authenticates)."""


class JobHeartbeat(Event, tag="job_heartbeat", frozen=True):
    """The job's coordinator is alive. A job silent for longer than the scheduler's
    VENN_JOB_TIMEOUT_S is expired and its demand released. Topic venn.jobs, key job_id."""

    job_id: Id
    token: Token | None = None
    """The job owner's API token (required when the deployment authenticates)."""


class JobExpired(Event, tag="job_expired", frozen=True):
    """The scheduler dropped a job whose coordinator fell silent. Topic venn.jobs."""

    job_id: Id
    last_seen: Timestamp
    reason: Text
    token: Token | None = None
    """An operator's (admin) token: the scheduler signs what it decides on its own."""


class JobAdmission(Event, tag="job_admission", frozen=True, kw_only=True):
    """The job API's decision on a submission (`venn.core.admission`): refused (with why),
    queued (the submission is kept here, and registered as it was when it is admitted), or
    admitted (now, or from the queue; ``reason`` carries a late finish's warning); or, with
    ``registration`` (v2), the scheduler's verdict on a registration it read, judged against
    the operator's limits where they are decided (admitted or refused). Venn decides it: it
    carries an operator's token. Topic venn.jobs, key job_id."""

    version: ClassVar[int] = 2

    schema_version: Literal[1, 2] = 2  # type: ignore[assignment]
    job_id: Id
    decision: Literal["admitted", "queued", "refused"]
    reason: Text
    estimate: Timestamp | None = None
    """The completion estimate made for the decision, if one was."""
    requirement: Attrs | None = None
    """A queued submission's spec (this and the fields below), registered when admitted."""
    demand: Demand | None = None
    rounds: Rounds | None = None
    deadline_s: PosDuration | None = None
    workload_s: Duration | None = None
    submit_token: Id | None = None
    priority: Priority | None = None
    """Its priority class inside its tenant (None: 0), carried to the registration."""
    owner: Id | None = None
    """Who submitted it (the subject of their token): the registration's token is theirs,
    and so is its tenant."""
    token: Token | None = None
    """An operator's (admin) token."""
    registration: EventId | None = None
    """The event id of the registration this verdict of the scheduler's is on (v2); None:
    the job API's decision on a submission."""


class Assignment(Event, tag="assignment", frozen=True, kw_only=True):
    version: ClassVar[int] = 2

    # A type at a later version reads the earlier ones too (a wider Literal than Event's).
    schema_version: Literal[1, 2] = 2  # type: ignore[assignment]
    job_id: Id
    round_index: RoundIndex
    device_id: Id
    task_url: Url
    speed_ms_per_sample: Speed
    bandwidth_kbps: Bandwidth
    checkin_id: CheckinId | None = None
    """The check-in this assignment answers (v2): the gateway holding it answers the device.
    None in v1 events, and where no check-in is known (an assignment made from elsewhere)."""


class CheckinBatch(Event, tag="checkin_batch", frozen=True):
    """Check-ins a gateway received within a few milliseconds, as one message: the broker
    and the stream processor pay per message, not per byte. Topic venn.checkins."""

    checkins: Annotated[list[DeviceCheckin], msgspec.Meta(max_length=BATCH_MAX)]
    reply_to: Id | None = None
    """Where the scheduler sends CheckinsDeclined for the check-ins it did not assign
    (a gateway's id); None: no reply."""


class AssignmentBatch(Event, tag="assignment_batch", frozen=True):
    """The assignments one check-in batch gave one job. Topic venn.assignments, key job_id."""

    job_id: Id
    assignments: Annotated[list[Assignment], msgspec.Meta(max_length=BATCH_MAX)]


def unbatch(event: Event) -> list[Event]:
    """A batch's items, or the event itself."""
    if isinstance(event, CheckinBatch):
        return list(event.checkins)
    if isinstance(event, AssignmentBatch):
        return list(event.assignments)
    return [event]


def checkins_of(event: Event) -> list[DeviceCheckin]:
    """The check-ins an event carries: itself, a batch's items, or none."""
    if isinstance(event, CheckinBatch):
        return event.checkins
    if isinstance(event, DeviceCheckin):
        return [event]
    return []


def assignments_of(event: Event) -> list[Assignment]:
    """The assignments an event carries: itself, a batch's items, or none."""
    if isinstance(event, AssignmentBatch):
        return event.assignments
    if isinstance(event, Assignment):
        return [event]
    return []


class SupplyCount(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """How many check-ins with one attribute set a gateway received in one interval."""

    attrs: Attrs
    count: Count


class SupplyReport(Event, tag="supply_report", frozen=True, kw_only=True):
    """A gateway's count of the check-ins it received in the last ``interval_s`` seconds,
    per attribute set, whether it forwarded them or answered them at once (each device
    counted once per interval): the supply mix the scheduler plans with. Topic
    venn.checkins, key the gateway's id."""

    version: ClassVar[int] = 2

    schema_version: Literal[1, 2] = 2  # type: ignore[assignment]
    gateway: Id
    interval_s: PosDuration
    counts: Annotated[list[SupplyCount], msgspec.Meta(max_length=BATCH_MAX)]
    token: Token | None = None
    """The gateway's own token (v2; kind ``gateway``, its subject the gateway's id), which
    only a holder of the deployment's secret can make: where the deployment authenticates,
    the scheduler counts a report only with one naming its gateway, so a record another
    principal writes to venn.checkins cannot pose as a gateway's counts."""


class CheckinsDeclined(Event, tag="checkins_declined", frozen=True):
    """The check-ins of one batch that got no assignment. Topic venn.replies."""

    reply_to: Id
    checkin_ids: Annotated[list[CheckinId], msgspec.Meta(max_length=BATCH_MAX)]


class DeviceResult(Event, tag="device_result", frozen=True):
    job_id: Id
    round_index: RoundIndex
    device_id: Id
    ok: bool
    response_time_s: Duration
    reason: Text | None = None


class RoundClosed(Event, tag="round_closed", frozen=True):
    """A round attempt ended. `round_index` counts attempts: a failed round's retry is a new
    round_index, so (job_id, round_index) identifies exactly one close."""

    job_id: Id
    round_index: RoundIndex
    outcome: Literal["succeeded", "failed"]
    demand: Demand
    assigned: Count
    results: Count
    opened_at: Timestamp
    closed_at: Timestamp
    reason: Text
    sched_delay_s: Duration
    response_time_s: Duration
    token: Token | None = None
    """The job owner's API token (required when the deployment authenticates)."""


class JobFinished(Event, tag="job_finished", frozen=True):
    job_id: Id
    rounds_completed: RoundCount
    arrival: Timestamp
    finished_at: Timestamp
    jct_s: Duration
    token: Token | None = None
    """The job owner's API token (required when the deployment authenticates)."""


class DeadLetter(Event, tag="dead_letter", frozen=True):
    original: Base64
    """base64 of (at most the first ORIGINAL_PREFIX_MAX bytes of) the original value."""
    original_size: Size
    original_sha256: Sha256
    reason: Text
    source_topic: TopicName
    partition: Partition
    offset: Offset

    def original_bytes(self) -> bytes:
        """The kept prefix of the original value (all of it when it was small enough)."""
        return base64.b64decode(self.original)


class TokenRevoked(Event, tag="token_revoked", frozen=True):
    """An API token that must no longer be accepted from ``time`` on (the revoker's clock;
    only the admin principal writes venn.revocations). Topic venn.revocations, key
    token_id."""

    token_id: EventId
    expires_at: Timestamp
    """When the token would have expired anyway."""
    reason: Text


class DeviceEnrolled(Event, tag="device_enrolled", frozen=True):
    """A device id enrolled (`POST /v1/devices`) by the owner of an enrol token. Topic
    venn.enrolments, key device_id; only gateways write it. The first enrolment of an id
    holds it: an enrol token of another owner may not enrol it again."""

    device_id: Id
    owner: Text
    """The enrol token's subject (`venn token enroll --owner`)."""
    token_id: EventId
    """The enrol token's id (its jti)."""


EVENT_TYPES: tuple[type[Event], ...] = (
    DeviceCheckin,
    CheckinBatch,
    AssignmentBatch,
    CheckinsDeclined,
    JobRegistered,
    RoundRequested,
    JobCancelled,
    Assignment,
    DeviceResult,
    RoundClosed,
    JobFinished,
    DeadLetter,
    TokenRevoked,
    JobHeartbeat,
    JobExpired,
    DeviceEnrolled,
    SupplyReport,
    JobAdmission,
)

AnyEvent = (
    DeviceCheckin
    | CheckinBatch
    | AssignmentBatch
    | CheckinsDeclined
    | JobRegistered
    | RoundRequested
    | JobCancelled
    | Assignment
    | DeviceResult
    | RoundClosed
    | JobFinished
    | DeadLetter
    | TokenRevoked
    | JobHeartbeat
    | JobExpired
    | DeviceEnrolled
    | SupplyReport
    | JobAdmission
)

ALLOWED_ON: dict[str, tuple[type[Event], ...]] = {
    topics.CHECKINS: (DeviceCheckin, CheckinBatch, SupplyReport),
    topics.JOBS: (
        JobRegistered,
        RoundRequested,
        JobCancelled,
        JobHeartbeat,
        JobExpired,
        JobAdmission,
    ),
    topics.ASSIGNMENTS: (Assignment, AssignmentBatch),
    topics.RESULTS: (DeviceResult,),
    topics.ROUNDS: (RoundClosed, JobFinished),
    topics.DEAD_LETTERS: (DeadLetter,),
    topics.REPLIES: (CheckinsDeclined,),
    topics.REVOCATIONS: (TokenRevoked,),
    topics.STATUS: (),
    topics.ENROLMENTS: (DeviceEnrolled,),
}
"""Which event types each topic may carry (venn.status carries no events: the scheduler's
snapshots, `venn.core.status.SchedulerStatus`)."""

DEFAULT_MAX_BYTES = 65536


class InvalidEvent(ValueError):
    """Raised by `decode` for anything that is not a valid, allowed event.

    `kind` is a stable machine-readable category; str(exc) is a human reason.
    """

    KINDS = (
        "oversized",
        "empty",
        "not_json",
        "not_an_object",
        "missing_type",
        "unknown_type",
        "missing_field",
        "unknown_field",
        "wrong_type",
        "invalid_value",
        "not_allowed",
    )

    def __init__(self, kind: str, detail: str) -> None:
        assert kind in self.KINDS, kind
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail

    @property
    def reason(self) -> str:
        return str(self)


_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(AnyEvent)


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


def key_of(event: Event) -> bytes:
    """Partition key: device_id for check-ins, job_id for job-scoped events, the token id of
    a revocation (the compaction key)."""
    if isinstance(event, DeviceCheckin | DeviceEnrolled):
        return event.device_id.encode()
    if isinstance(event, TokenRevoked):
        return event.token_id.encode()
    if isinstance(event, SupplyReport):
        return event.gateway.encode()
    job_id = getattr(event, "job_id", None)
    if isinstance(job_id, str):
        return job_id.encode()
    return event.event_id.encode()


def decode(
    raw: bytes | None,
    allowed: tuple[type[Event], ...] = EVENT_TYPES,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Event:
    """Decode one message value into an event of one of the `allowed` types.

    Raises InvalidEvent (only) for oversized, empty, non-JSON, wrongly typed, incomplete,
    unknown or not-allowed input.
    """
    if raw is None or len(raw) == 0:
        raise InvalidEvent("empty", "message has no value")
    if len(raw) > max_bytes:
        raise InvalidEvent("oversized", f"{len(raw)} bytes exceeds the limit of {max_bytes}")
    try:
        event = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise _classify(str(exc)) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidEvent("not_json", f"not valid UTF-8 JSON ({exc})") from None
    if not isinstance(event, allowed):
        names = ", ".join(t.type_name() for t in allowed)
        raise InvalidEvent(
            "not_allowed",
            f"event type {event.type_name()!r} is not allowed here (allowed: {names})",
        )
    return event


class _BatchEnvelope(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    type: Literal["checkin_batch"]
    schema_version: Literal[1] = 1
    event_id: Id
    time: float
    checkins: Annotated[list[msgspec.Raw], msgspec.Meta(max_length=BATCH_MAX)]
    reply_to: Id | None = None


_envelope_decoder = msgspec.json.Decoder(_BatchEnvelope)


def encode_checkin_batch(
    event_id: str, time: float, checkins: list[bytes], reply_to: str | None = None
) -> bytes:
    """A CheckinBatch from already encoded DeviceCheckin events (a gateway encodes each
    check-in once, to know the batch's size as it grows)."""
    envelope = _BatchEnvelope(
        type="checkin_batch",
        event_id=event_id,
        time=time,
        checkins=[msgspec.Raw(c) for c in checkins],
        reply_to=reply_to,
    )
    return _encoder.encode(envelope)


def salvage_checkins(
    raw: bytes, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[CheckinBatch, list[tuple[bytes, InvalidEvent]]] | None:
    """For a check-in batch that failed strict decoding: a batch of its valid check-ins and
    (item bytes, reason) for each invalid one, so one bad device loses none of the others.
    None when the envelope itself is not a valid batch (the whole message is bad)."""
    if not raw or len(raw) > max_bytes:
        return None
    try:
        envelope = _envelope_decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    valid: list[DeviceCheckin] = []
    invalid: list[tuple[bytes, InvalidEvent]] = []
    for item in envelope.checkins:
        item_bytes = bytes(item)
        try:
            checkin = decode(item_bytes, (DeviceCheckin,), max_bytes)
        except InvalidEvent as exc:
            invalid.append((item_bytes, exc))
            continue
        assert isinstance(checkin, DeviceCheckin)
        valid.append(checkin)
    batch = CheckinBatch(
        event_id=envelope.event_id,
        time=envelope.time,
        checkins=valid,
        reply_to=envelope.reply_to,
    )
    return batch, invalid


def _classify(message: str) -> InvalidEvent:
    # msgspec's messages are stable for a pinned version; tests pin each category.
    if message.startswith("Expected `object`, got") and " - at " not in message:
        return InvalidEvent("not_an_object", f"top-level JSON value must be an object ({message})")
    if message == "Object missing required field `type`":
        return InvalidEvent("missing_type", "object has no `type` field")
    if message.endswith("- at `$.type`"):
        if message.startswith("Invalid value"):
            known = ", ".join(t.type_name() for t in EVENT_TYPES)
            return InvalidEvent("unknown_type", f"{message}; known types: {known}")
        return InvalidEvent("wrong_type", f"`type` must be a string ({message})")
    if message.startswith("Object missing required field"):
        return InvalidEvent("missing_field", message)
    if message.startswith("Object contains unknown field"):
        return InvalidEvent("unknown_field", message)
    if message.startswith("Expected `") and ", got `" in message:
        return InvalidEvent("wrong_type", message)
    return InvalidEvent("invalid_value", message)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean_text(text: str, limit: int = TEXT_MAX) -> str:
    """``text`` as a valid Text field: control characters replaced, cut to ``limit``."""
    cleaned = _CONTROL.sub(" ", text)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def dead_letter_id(topic: str, partition: int, offset: int) -> str:
    """The id of the dead letter of the record at this position (one per record)."""
    return f"dead:{topic}:{partition}:{offset}"


def dead_letter_for(
    raw: bytes | None, reason: str, topic: str, partition: int, offset: int, now: float
) -> DeadLetter:
    """The dead letter for a bad message, bounded whatever the message's size: a prefix of
    the original plus its size and SHA-256. Its event_id is derived from the message
    position, so re-processing the same bad message yields the same dead letter id."""
    original = raw or b""
    return DeadLetter(
        event_id=dead_letter_id(topic, partition, offset),
        time=min(max(now, 0.0), 1e11),
        original=base64.b64encode(original[:ORIGINAL_PREFIX_MAX]).decode("ascii"),
        original_size=len(original),
        original_sha256=hashlib.sha256(original).hexdigest(),
        reason=clean_text(reason),
        source_topic=topic,
        partition=partition,
        offset=offset,
    )


def schema_path(event_type: type[Event], version: int | None = None) -> Path:
    """The schema file of a type's ``version`` (default: its current one)."""
    number = event_type.version if version is None else version
    return SCHEMA_DIR / f"{event_type.type_name()}.v{number}.json"


def load_schema(event_type: type[Event], version: int | None = None) -> dict[str, Any]:
    result: dict[str, Any] = msgspec.json.decode(schema_path(event_type, version).read_bytes())
    return result
