"""Event models vs. their JSON Schemas, and the strict decoder's error categories."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, cast

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource

from venn import events, fields, schema_files
from venn.events import (
    EVENT_TYPES,
    SCHEMA_DIR,
    Assignment,
    AssignmentBatch,
    CheckinBatch,
    CheckinsDeclined,
    DeadLetter,
    DeviceCheckin,
    DeviceEnrolled,
    DeviceResult,
    Event,
    InvalidEvent,
    JobAdmission,
    JobCancelled,
    JobExpired,
    JobFinished,
    JobHeartbeat,
    JobRegistered,
    RoundClosed,
    RoundRequested,
    SupplyCount,
    SupplyReport,
    TokenRevoked,
    dead_letter_for,
    decode,
    encode,
    load_schema,
)

SAMPLES: dict[type[Event], Event] = {
    DeviceCheckin: DeviceCheckin(
        event_id="c1",
        time=1.5,
        device_id="d1",
        attrs={"cpu_f": 2.1, "ram": 4096, "fp16_mem": 1.0, "android_os": 11},
        speed_ms_per_sample=12.5,
        bandwidth_kbps=8000,
    ),
    JobRegistered: JobRegistered(
        event_id="j1-reg",
        time=0.0,
        job_id="j1",
        requirement={"ram": 2048},
        demand=10,
        rounds=3,
        deadline_s=600,
        workload_s=120,
    ),
    RoundRequested: RoundRequested(
        event_id="j1-r0-req", time=1.0, job_id="j1", round_index=0, demand=10
    ),
    JobCancelled: JobCancelled(event_id="j1-cancel", time=9.0, job_id="j1", reason="owner"),
    Assignment: Assignment(
        event_id="a1",
        time=2.0,
        job_id="j1",
        round_index=0,
        device_id="d1",
        task_url="http://127.0.0.1:8080/tasks/j1/0",
        speed_ms_per_sample=12.5,
        bandwidth_kbps=8000,
        checkin_id="gw-c1",
    ),
    DeviceResult: DeviceResult(
        event_id="r1",
        time=3.0,
        job_id="j1",
        round_index=0,
        device_id="d1",
        ok=False,
        response_time_s=1.0,
        reason="dropout",
    ),
    RoundClosed: RoundClosed(
        event_id="j1-r0-closed",
        time=4.0,
        job_id="j1",
        round_index=0,
        outcome="succeeded",
        demand=10,
        assigned=10,
        results=8,
        opened_at=1.0,
        closed_at=4.0,
        reason="",
        sched_delay_s=0.5,
        response_time_s=2.5,
    ),
    JobFinished: JobFinished(
        event_id="j1-done",
        time=5.0,
        job_id="j1",
        rounds_completed=3,
        arrival=0.0,
        finished_at=5.0,
        jct_s=5.0,
    ),
    DeadLetter: dead_letter_for(b"\x00junk", "not_json: x", "venn.jobs", 2, 17, now=6.0),
}
SAMPLES[CheckinBatch] = CheckinBatch(
    event_id="b1", time=1.6, checkins=[cast(DeviceCheckin, SAMPLES[DeviceCheckin])], reply_to="gw-1"
)
SAMPLES[AssignmentBatch] = AssignmentBatch(
    event_id="ab1", time=2.1, job_id="j1", assignments=[cast(Assignment, SAMPLES[Assignment])]
)
SAMPLES[TokenRevoked] = TokenRevoked(
    event_id="rev1", time=7.0, token_id="0f" * 16, expires_at=1e9, reason="device lost"
)
SAMPLES[DeviceEnrolled] = DeviceEnrolled(
    event_id="enrol1", time=7.5, device_id="d1", owner="fleet a", token_id="0e" * 16
)
SAMPLES[JobHeartbeat] = JobHeartbeat(event_id="hb1", time=8.0, job_id="j1")
SAMPLES[JobExpired] = JobExpired(
    event_id="exp1", time=9.0, job_id="j1", last_seen=1.0, reason="silent"
)
SAMPLES[JobAdmission] = JobAdmission(
    event_id="adm1",
    time=9.5,
    job_id="j2",
    decision="queued",
    reason="running_jobs_limit: 4 jobs running, the limit is 4",
    requirement={"ram": 2.0},
    demand=10,
    rounds=5,
    deadline_s=300.0,
    workload_s=20.0,
    owner="team-a",
)
SAMPLES[CheckinsDeclined] = CheckinsDeclined(
    event_id="dec1", time=2.2, reply_to="gw-1", checkin_ids=["c1"]
)
SAMPLES[SupplyReport] = SupplyReport(
    event_id="sr1",
    time=2.3,
    gateway="gw-1",
    interval_s=1.0,
    counts=[SupplyCount(attrs={"ram_gb": 4.0}, count=12)],
)

ALL = list(SAMPLES.values())
IDS = [type(e).type_name() for e in ALL]


# Batch schemas refer to the item schemas by relative $ref.
REGISTRY: Registry[Any] = Registry().with_resources(
    (load_schema(t)["$id"], Resource.from_contents(load_schema(t))) for t in EVENT_TYPES
)


def test_every_schema_file_is_a_version_its_type_reads() -> None:
    names = {t.type_name(): t for t in EVENT_TYPES}
    for path in SCHEMA_DIR.glob("*.json"):
        name, version = path.stem.rsplit(".v", 1)
        assert name in names and 1 <= int(version) <= names[name].version, path.name


def test_an_assignment_of_version_1_is_still_read() -> None:
    """v2 added the check-in's id; a v1 assignment (written before) decodes without it."""
    doc = as_dict(SAMPLES[Assignment])
    del doc["checkin_id"]
    doc["schema_version"] = 1
    v1 = _Validator(load_schema(Assignment, 1), registry=REGISTRY)
    v1.validate(doc)
    old = decode(json.dumps(doc).encode())
    assert isinstance(old, Assignment) and old.checkin_id is None and old.schema_version == 1
    assert SAMPLES[Assignment].schema_version == 2
    assert not v1.is_valid(as_dict(SAMPLES[Assignment]))  # v1 has no checkin_id


# JSON Schema counts 1e11 and 5.0 as integers; our decoders (and most typed consumers)
# take only integer literals for integer fields, and the schemas mean that.
_LITERAL_INTEGERS = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
)
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, type_checker=_LITERAL_INTEGERS
)


def validator(event_type: type[Event]) -> jsonschema.Draft202012Validator:
    schema = load_schema(event_type)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator: jsonschema.Draft202012Validator = _Validator(schema, registry=REGISTRY)
    return validator


def as_dict(event: Event) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(encode(event))
    return result


def rejected_by_both(event_type: type[Event], doc: dict[str, Any]) -> InvalidEvent:
    assert not validator(event_type).is_valid(doc), doc
    with pytest.raises(InvalidEvent) as info:
        decode(json.dumps(doc).encode())
    return info.value


def test_every_event_type_has_a_sample_and_a_schema() -> None:
    assert set(SAMPLES) == set(EVENT_TYPES)
    for event_type in EVENT_TYPES:
        schema = load_schema(event_type)
        assert schema["$id"].endswith(f"/{event_type.type_name()}.v{event_type.version}.json")
        assert schema["additionalProperties"] is False
        assert schema["properties"]["type"] == {
            "const": event_type.type_name(),
            "description": "Event type tag.",
        }


@pytest.mark.parametrize("event", ALL, ids=IDS)
def test_round_trip_and_schema_valid(event: Event) -> None:
    raw = encode(event)
    assert decode(raw) == event
    assert decode(raw, allowed=(type(event),)) == event
    validator(type(event)).validate(json.loads(raw))


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=[t.type_name() for t in EVENT_TYPES])
def test_schema_and_model_agree_on_fields(event_type: type[Event]) -> None:
    schema = load_schema(event_type)
    fields = msgspec.structs.fields(event_type)
    # Convention (see venn/events.py): optional <=> default None; everything else is required.
    model_required = {"type"} | {f.name for f in fields if f.default is not None}
    assert set(schema["required"]) == model_required
    assert set(schema["properties"]) == {"type"} | {f.name for f in fields}


@pytest.mark.parametrize("event", ALL, ids=IDS)
def test_each_required_field_is_required_by_both(event: Event) -> None:
    schema = load_schema(type(event))
    for name in schema["required"]:
        doc = as_dict(event)
        del doc[name]
        if name == "schema_version":
            # Documented leniency: a missing version reads as v1; the schema still requires it.
            assert not validator(type(event)).is_valid(doc)
            assert decode(json.dumps(doc).encode()) == event
            continue
        err = rejected_by_both(type(event), doc)
        assert err.kind == ("missing_type" if name == "type" else "missing_field")
        if name != "type":
            assert f"`{name}`" in str(err)


@pytest.mark.parametrize("event", ALL, ids=IDS)
def test_wrong_json_types_are_rejected_by_both(event: Event) -> None:
    for name in as_dict(event):
        doc = as_dict(event)
        doc[name] = [1, 2]  # no field of any event is an array
        err = rejected_by_both(type(event), doc)
        if name != "type":
            assert err.kind in ("wrong_type", "invalid_value")
            assert name in str(err)


@pytest.mark.parametrize("event", ALL, ids=IDS)
def test_schema_lower_bounds_are_enforced_by_the_model(event: Event) -> None:
    schema = load_schema(type(event))
    checked = 0
    for name, prop in schema["properties"].items():
        doc = as_dict(event)
        if "minimum" in prop:
            doc[name] = prop["minimum"] - 1
        elif "exclusiveMinimum" in prop:
            doc[name] = prop["exclusiveMinimum"]
        elif prop.get("minLength") == 1:
            doc[name] = ""
        elif "enum" in prop:
            members = prop["enum"]
            numeric = all(isinstance(m, int) for m in members)
            doc[name] = max(members) + 1 if numeric else "not-a-member"
        elif "const" in prop and name != "type":
            doc[name] = prop["const"] + 1
        else:
            continue
        err = rejected_by_both(type(event), doc)
        assert err.kind == "invalid_value", err
        checked += 1
    assert checked >= 2  # at least event_id and schema_version


@pytest.mark.parametrize("event", ALL, ids=IDS)
def test_unknown_fields_are_rejected_by_both(event: Event) -> None:
    doc = as_dict(event)
    doc["surprise"] = 1
    assert rejected_by_both(type(event), doc).kind == "unknown_field"


def _round_requested(**changes: Any) -> bytes:
    doc = as_dict(SAMPLES[RoundRequested])
    doc.update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("raw", "kind", "needle"),
    [
        (b"", "empty", "no value"),
        (b"\xff\xfe\x00garbage", "not_json", "JSON"),
        (b"hello world", "not_json", "malformed"),
        (b'{"type": "round_requested"', "not_json", "truncated"),
        (b'{"type": "\xff"}', "not_json", "utf-8"),
        (b"[1, 2]", "not_an_object", "must be an object"),
        (b'"round_requested"', "not_an_object", "must be an object"),
        (b'{"job_id": "j1"}', "missing_type", "`type`"),
        (b'{"type": "job_exploded"}', "unknown_type", "job_exploded"),
        (b'{"type": 7}', "wrong_type", "`type` must be a string"),
        (_round_requested(demand="ten"), "wrong_type", "$.demand"),
        (_round_requested(round_index=1.5), "wrong_type", "$.round_index"),
        (_round_requested(demand=0), "invalid_value", ">= 1"),
        (_round_requested(schema_version=2), "invalid_value", "schema_version"),
        (_round_requested(extra=True), "unknown_field", "extra"),
    ],
)
def test_bad_input_gives_a_specific_reason(raw: bytes, kind: str, needle: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        decode(raw)
    assert info.value.kind == kind
    assert needle.lower() in str(info.value).lower()
    assert str(info.value).startswith(f"{kind}: ")


def test_missing_field_names_the_field() -> None:
    doc = as_dict(SAMPLES[RoundRequested])
    del doc["round_index"]
    with pytest.raises(InvalidEvent, match=r"missing_field: .*`round_index`"):
        decode(json.dumps(doc).encode())


def test_oversized_is_rejected_before_parsing() -> None:
    raw = encode(SAMPLES[DeviceCheckin])
    assert decode(raw, max_bytes=len(raw)) == SAMPLES[DeviceCheckin]
    with pytest.raises(
        InvalidEvent, match=f"oversized: {len(raw)} bytes exceeds .* {len(raw) - 1}"
    ):
        decode(raw, max_bytes=len(raw) - 1)
    with pytest.raises(InvalidEvent) as info:
        decode(b"x" * 100, max_bytes=10)  # garbage, but size is checked first
    assert info.value.kind == "oversized"


def test_type_not_allowed_on_topic() -> None:
    raw = encode(SAMPLES[DeviceCheckin])
    with pytest.raises(InvalidEvent) as info:
        decode(raw, allowed=events.ALLOWED_ON["venn.jobs"])
    assert info.value.kind == "not_allowed"
    assert "'device_checkin'" in str(info.value)
    assert "job_registered" in str(info.value)


def test_allowed_on_covers_every_topic_and_type() -> None:
    from venn.broker.topics import ALL_TOPICS

    assert set(events.ALLOWED_ON) == set(ALL_TOPICS)
    covered = {t for types in events.ALLOWED_ON.values() for t in types}
    assert covered == set(EVENT_TYPES)


def test_dead_letter_keeps_original_bytes_and_position() -> None:
    original = b"\x00\x01 not json \xff"
    dl = dead_letter_for(original, "not_json: boom", "venn.rounds", 3, 99, now=12.0)
    assert dl.original_bytes() == original
    assert dl.original_size == len(original)
    assert dl.original_sha256 == hashlib.sha256(original).hexdigest()
    assert base64.b64decode(dl.original) == original
    assert (dl.source_topic, dl.partition, dl.offset, dl.reason) == (
        "venn.rounds",
        3,
        99,
        "not_json: boom",
    )
    assert dl.event_id == dead_letter_for(b"", "", "venn.rounds", 3, 99, 0.0).event_id
    validator(DeadLetter).validate(as_dict(dl))
    assert decode(encode(dl), allowed=(DeadLetter,)) == dl


def test_a_dead_letter_stays_small_whatever_the_size_of_the_original() -> None:
    """Defect 1 of issue 12: a 790 KB record was dead-lettered whole (over 1 MiB in base64),
    above the producer's request size, and stopped the scheduler for good."""
    original = bytes(range(256)) * 40_000  # 10 MB
    reason = "oversized:\x00 " + "y" * 5000 + "\nsecond line"
    dl = dead_letter_for(original, reason, "venn.checkins", 0, 1, now=1.0)
    raw = encode(dl)
    assert len(raw) < 8 * 1024
    assert dl.original_bytes() == original[: fields.ORIGINAL_PREFIX_MAX]
    assert dl.original_size == len(original)
    assert dl.original_sha256 == hashlib.sha256(original).hexdigest()
    assert len(dl.reason) <= fields.TEXT_MAX and "\x00" not in dl.reason and "\n" not in dl.reason
    assert decode(raw, allowed=(DeadLetter,)) == dl
    validator(DeadLetter).validate(as_dict(dl))


def test_schema_bounds_agree_with_the_models() -> None:
    assert schema_files.differences() == []


def _past(prop: dict[str, Any]) -> Any:
    """A value just past the upper bound of a property, or None when it has none."""
    if "maximum" in prop:
        top = prop["maximum"]
        return top + 1 if isinstance(top, int) else top * 1.5
    if "maxLength" in prop:
        return "a" * (prop["maxLength"] + 1)
    if "maxItems" in prop:
        return None  # items of batches: checked below with real items
    if "maxProperties" in prop:
        return {f"a{i}": 1.0 for i in range(prop["maxProperties"] + 1)}
    return None


@pytest.mark.parametrize("event", ALL, ids=IDS)
def test_schema_upper_bounds_are_enforced_by_the_model(event: Event) -> None:
    schema = load_schema(type(event))
    checked = 0
    for name, prop in schema["properties"].items():
        value = _past(prop)
        if value is None:
            continue
        doc = as_dict(event)
        doc[name] = value
        err = rejected_by_both(type(event), doc)
        assert err.kind == "invalid_value", err
        checked += 1
    assert checked >= 2  # at least event_id and time


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("job_id", "job\x00"),
        ("job_id", "has space"),
        ("job_id", "line\nbreak"),
        ("job_id", "j" * (fields.ID_MAX + 1)),
        ("demand", 2**63),
        ("demand", fields.DEMAND_MAX + 1),
        ("rounds", 2**31),
        ("deadline_s", 1e300),
        ("requirement", {"ram": 1e300}),
        ("requirement", {"bad name": 1.0}),
        ("requirement", {f"a{i}": 1.0 for i in range(fields.ATTRS_MAX + 1)}),
    ],
)
def test_values_no_store_can_hold_are_rejected(field: str, value: Any) -> None:
    """Defects 2 and 3 of issue 12: demand 2**63 broke every check-in batch in the core's
    int64 tables; a job id over 200 characters, integers of 2**31 and NUL characters
    wedged the recorder."""
    doc = as_dict(SAMPLES[JobRegistered])
    doc[field] = value
    assert rejected_by_both(JobRegistered, doc).kind == "invalid_value"


def test_values_at_the_bounds_are_accepted() -> None:
    doc = as_dict(SAMPLES[JobRegistered])
    doc.update(
        job_id="j" * fields.ID_MAX,
        demand=fields.DEMAND_MAX,
        rounds=fields.ROUNDS_MAX,
        requirement={f"a{i}": fields.MEASURE_MAX for i in range(fields.ATTRS_MAX)},
        deadline_s=fields.DURATION_MAX,
        time=fields.TIME_MAX,
    )
    validator(JobRegistered).validate(doc)
    event = decode(json.dumps(doc).encode())
    assert isinstance(event, JobRegistered) and event.demand == fields.DEMAND_MAX


def test_batches_are_bounded() -> None:
    checkin = as_dict(SAMPLES[DeviceCheckin])
    doc = as_dict(SAMPLES[CheckinBatch])
    doc["checkins"] = [checkin] * (fields.BATCH_MAX + 1)
    assert not validator(CheckinBatch).is_valid(doc)
    raw = json.dumps(doc).encode()
    with pytest.raises(InvalidEvent) as info:
        decode(raw, max_bytes=len(raw))
    assert info.value.kind == "invalid_value"
    doc["checkins"] = [checkin] * fields.BATCH_MAX
    raw = json.dumps(doc).encode()
    assert len(decode(raw, max_bytes=len(raw)).checkins) == fields.BATCH_MAX  # type: ignore[attr-defined]


def test_keys() -> None:
    assert events.key_of(SAMPLES[DeviceCheckin]) == b"d1"
    assert events.key_of(SAMPLES[RoundClosed]) == b"j1"


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=300))
def test_decode_never_raises_anything_but_invalid_event(raw: bytes) -> None:
    try:
        event = decode(raw)
    except InvalidEvent as exc:
        assert exc.kind in InvalidEvent.KINDS
    else:
        assert isinstance(event, Event)


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=3)
    # at and past every integer bound: int32, int64, the demand and round limits
    | st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1])
    | st.sampled_from([fields.DEMAND_MAX, fields.DEMAND_MAX + 1, fields.ROUNDS_MAX + 1])
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer())
    | st.sampled_from([fields.TIME_MAX, fields.TIME_MAX * 2, fields.MEASURE_MAX * 2, 1e308])
    | st.text(max_size=3)
    | st.text(alphabet=st.characters(max_codepoint=0x9F), max_size=4)  # control characters
    | st.sampled_from([fields.ID_MAX, fields.ID_MAX + 1, fields.EVENT_ID_MAX + 1]).map(
        lambda n: "x" * n
    )
)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(ALL), st.data())
def test_model_and_schema_agree_on_mutated_events(event: Event, data: st.DataObject) -> None:
    doc = as_dict(event)
    name = data.draw(st.sampled_from(sorted(doc)))
    doc[name] = data.draw(JSON_SCALARS)
    schema_ok = validator(type(event)).is_valid(doc)
    try:
        decode(json.dumps(doc).encode())
    except InvalidEvent:
        model_ok = False
    else:
        model_ok = True
    assert model_ok == schema_ok, (name, doc[name])


def test_an_integral_float_in_an_integer_field_is_refused_by_both() -> None:
    doc = as_dict(SAMPLES[DeadLetter])
    doc["offset"] = 1e11  # a hypothesis find: the stock JSON Schema integer took it
    assert rejected_by_both(DeadLetter, doc).kind == "wrong_type"


def test_a_bad_item_in_a_checkin_batch_loses_none_of_the_others() -> None:
    good = SAMPLES[DeviceCheckin]
    doc = as_dict(SAMPLES[CheckinBatch])
    doc["checkins"] = [as_dict(good), {**as_dict(good), "device_id": ""}, {"type": "x"}]
    raw = json.dumps(doc).encode()
    assert rejected_by_both(CheckinBatch, doc).kind == "invalid_value"
    salvaged = events.salvage_checkins(raw)
    assert salvaged is not None
    batch, bad = salvaged
    assert batch.checkins == [good] and batch.event_id == "b1" and batch.reply_to == "gw-1"
    assert [e.kind for _, e in bad] == ["invalid_value", "unknown_type"]
    assert json.loads(bad[0][0])["device_id"] == ""


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b'{"type": "checkin_batch"}',
        b'{"type":"checkin_batch","event_id":"b","time":1,"checkins":{}}',
        encode(SAMPLES[DeviceCheckin]),
    ],
)
def test_salvage_refuses_what_is_not_a_batch(raw: bytes) -> None:
    assert events.salvage_checkins(raw) is None


def test_a_batch_built_from_encoded_checkins_decodes_as_the_batch() -> None:
    batch = SAMPLES[CheckinBatch]
    assert isinstance(batch, CheckinBatch)
    raw = events.encode_checkin_batch(
        batch.event_id, batch.time, [encode(c) for c in batch.checkins], batch.reply_to
    )
    assert decode(raw, allowed=events.ALLOWED_ON["venn.checkins"]) == batch
    validator(CheckinBatch).validate(json.loads(raw))
