"""A job submission as a file or a request body: ``POST /v1/jobs`` and ``venn job submit``.

JSON or YAML (YAML is a superset of JSON), one mapping:

    job_id: my-job            # optional; made from submit_token, else random
    requirement: {ram: 4}     # attribute -> minimum (paper aliases accepted, venn.core.model)
    demand: 50                # devices per round
    rounds: 100
    deadline_s: 600           # per round
    workload_s: 30            # optional: expected on-device time of a task
    submit_token: 7f3a...     # optional: the same token again is the same submission

The bounds are the events' own (`venn.fields`), so a spec that parses here is a valid
JobRegistered.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import msgspec
import yaml

from venn.fields import Attrs, Demand, Duration, Id, PosDuration, Rounds


class JobSpecError(ValueError):
    """A spec that cannot be used: ``status`` 400 (not JSON/YAML, not a mapping) or 422 (a
    field missing, of the wrong type or out of bounds)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class JobSubmission(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    requirement: Attrs
    demand: Demand
    rounds: Rounds
    deadline_s: PosDuration
    workload_s: Duration = 30.0
    job_id: Id | None = None
    submit_token: Id | None = None

    def resolved_job_id(self, prefix: str = "job-") -> str:
        """The job id: given, else derived from the submit token (a retry gets the same
        id), else random."""
        if self.job_id is not None:
            return self.job_id
        if self.submit_token is not None:
            return prefix + hashlib.sha256(self.submit_token.encode()).hexdigest()[:16]
        return prefix + uuid.uuid4().hex[:16]


def _clean(value: Any) -> Any:
    """Lone surrogates (JSON escapes like \\ud845 are valid JSON strings, but no UTF-8
    event can hold them) become "?", keys and values alike."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def parse_job_spec(text: bytes | str) -> JobSubmission:
    """The submission in ``text`` (JSON or YAML); JobSpecError otherwise."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise JobSpecError(400, f"not JSON or YAML: {str(exc).splitlines()[0]}") from None
    except (RecursionError, UnicodeDecodeError) as exc:
        raise JobSpecError(400, f"not JSON or YAML: {exc}") from None
    if not isinstance(data, dict):
        raise JobSpecError(400, "a job spec is a mapping (requirement, demand, rounds, ...)")
    data = _clean(data)
    try:
        return msgspec.convert(data, JobSubmission, strict=False)
    except msgspec.ValidationError as exc:
        raise JobSpecError(422, str(exc)) from None
