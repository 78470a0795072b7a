"""Request and response bodies of the device API, and their strict decoding."""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec

from venn.fields import INDEX_MAX, Bandwidth, DeviceAttrs, Duration, Id, Speed, Text

# JSON Schema's "integer" includes 7.0 (a JSON number with a zero fraction), and some device
# SDKs send that: read a number, accept it when it is integral (checked in __post_init__).
IntegralIndex = Annotated[float, msgspec.Meta(ge=0, le=INDEX_MAX)]

T = TypeVar("T")


class CheckinRequest(msgspec.Struct, frozen=True):
    """`POST /v1/checkin`. Unknown top-level fields are ignored (newer device SDKs)."""

    device_id: Id
    attrs: DeviceAttrs
    speed_ms_per_sample: Speed
    bandwidth_kbps: Bandwidth


class ResultRequest(msgspec.Struct, frozen=True):
    """`POST /v1/results`: a device's result (or failure) for its assignment."""

    device_id: Id
    job_id: Id
    round_index: IntegralIndex
    ok: bool
    response_time_s: Duration
    reason: Text | None = None

    def __post_init__(self) -> None:
        if not float(self.round_index).is_integer():
            raise ValueError("Expected an integer - at `$.round_index`")

    @property
    def round(self) -> int:
        return int(self.round_index)


class EnrollmentRequest(msgspec.Struct, frozen=True):
    """`POST /v1/devices`: enrol a device; without a device_id the gateway makes one."""

    device_id: Id | None = None


class RequestError(Exception):
    """A request the gateway refuses: HTTP `status` with a JSON {error, detail} body."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail

    def body(self) -> dict[str, str]:
        return {"error": self.error, "detail": self.detail}


_checkin_decoder = msgspec.json.Decoder(CheckinRequest)
_result_decoder = msgspec.json.Decoder(ResultRequest)
_enrollment_decoder = msgspec.json.Decoder(EnrollmentRequest)


def _decode(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise RequestError(422, "invalid_request", str(exc)) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        # Invalid UTF-8 and nesting deeper than the decoder's limit are malformed bodies too.
        raise RequestError(400, "malformed_json", f"the body is not valid JSON ({exc})") from None


def decode_checkin(body: bytes) -> CheckinRequest:
    """400 for non-JSON, 422 for wrong types / missing fields / out-of-range values."""
    return _decode(_checkin_decoder, body)


def decode_result(body: bytes) -> ResultRequest:
    return _decode(_result_decoder, body)


def decode_enrollment(body: bytes) -> EnrollmentRequest:
    return _decode(_enrollment_decoder, body)
