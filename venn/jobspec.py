"""A job submission as a file or a request body: ``POST /v1/jobs`` and ``venn job submit``.

JSON or YAML (YAML is a superset of JSON), one mapping:

    job_id: my-job            # optional; made from submit_token, else random
    requirement: {ram: 4}     # attribute -> minimum (paper aliases accepted, venn.core.model)
    demand: 50                # devices per round
    rounds: 100
    deadline_s: 600           # per round
    workload_s: 30            # optional: expected on-device time of a task
    submit_token: 7f3a...     # optional: the same token again is the same submission
    priority: 1               # optional: priority class inside the owner's tenant (0)

The bounds are the events' own (`venn.fields`), so a spec that parses here is a valid
JobRegistered. The document itself is bounded before anything is built from it (issue 26,
item 4: a 427-byte alias bomb froze the gateway for 15 s): at most `SPEC_MAX_BYTES`, no
anchors or aliases (a spec never needs them, and they are what makes a few hundred bytes
expand to a billion nodes), at most `SPEC_MAX_DEPTH` levels of nesting. Reading one then
takes time linear in its few kilobytes.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import msgspec
import yaml

from venn.fields import Attrs, Demand, Duration, Id, PosDuration, Priority, Rounds, Timestamp

SPEC_MAX_BYTES = 16384
SPEC_MAX_DEPTH = 8
"""A spec is two levels deep (the mapping and its requirement)."""
_Loader = yaml.SafeLoader  # as yaml.safe_load (libyaml refuses some JSON strings it reads)
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


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
    priority: Priority = 0
    """Its priority class inside its tenant (higher first; `venn.core.tenants`)."""
    finish_by: Timestamp | None = None
    """When the job must be done (seconds, the epoch): a submission whose completion
    estimate misses it is refused (`venn.core.admission`)."""

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


def _check_shape(text: bytes | str) -> None:
    """JobSpecError for anchors, aliases or nesting past SPEC_MAX_DEPTH, found on the
    parser's event stream, before any node is composed or constructed."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise JobSpecError(
                400, "YAML anchors and aliases (&name, *name) are refused in a job spec"
            )
        if isinstance(event, _OPEN):
            depth += 1
            if depth > SPEC_MAX_DEPTH:
                raise JobSpecError(
                    400, f"nested too deep: a job spec has at most {SPEC_MAX_DEPTH} levels"
                )
        elif isinstance(event, _CLOSE):
            depth -= 1


def _depth(value: Any) -> int:
    """Levels of nesting of decoded JSON (without recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _load(text: bytes | str) -> Any:
    size = len(text.encode() if isinstance(text, str) else text)
    if size > SPEC_MAX_BYTES:
        raise JobSpecError(400, f"{size} bytes: a job spec has at most {SPEC_MAX_BYTES} bytes")
    try:
        # JSON, the API's own: no anchors or aliases, and read as JSON readers do (libyaml
        # refuses some valid JSON strings); anything else is YAML.
        data = msgspec.json.decode(text)
    except msgspec.DecodeError:
        pass
    except RecursionError:
        raise JobSpecError(
            400, f"nested too deep: a job spec has at most {SPEC_MAX_DEPTH} levels"
        ) from None
    else:
        if _depth(data) > SPEC_MAX_DEPTH:
            raise JobSpecError(
                400, f"nested too deep: a job spec has at most {SPEC_MAX_DEPTH} levels"
            )
        return data
    try:
        _check_shape(text)
        return yaml.load(text, Loader=_Loader)  # the safe loader
    except yaml.YAMLError as exc:
        raise JobSpecError(400, f"not JSON or YAML: {str(exc).splitlines()[0]}") from None
    except JobSpecError:
        raise
    except (RecursionError, UnicodeDecodeError, ValueError, OverflowError) as exc:
        # ValueError: an integer of more digits than Python converts (sys.int_info)
        raise JobSpecError(400, f"not JSON or YAML: {exc}") from None


def parse_job_spec(text: bytes | str) -> JobSubmission:
    """The submission in ``text`` (JSON or YAML); JobSpecError otherwise. Bounded in time
    by the document's bounds; still, a server runs it off its event loop."""
    data = _load(text)
    if not isinstance(data, dict):
        raise JobSpecError(400, "a job spec is a mapping (requirement, demand, rounds, ...)")
    data = _clean(data)
    try:
        return msgspec.convert(data, JobSubmission, strict=False)
    except msgspec.ValidationError as exc:
        raise JobSpecError(422, str(exc)) from None
