"""The bounds of every event field, in one place: what every store and array downstream can
hold (Postgres `integer` and `varchar(200)` columns, the core's int64 numpy tables, JSON
columns), so that a value that passes decoding can never wedge a consumer.

The event models (`venn.events`), the gateway's request bodies and the JSON Schemas in
`schemas/` all use these; tests/pure/test_events.py checks that schemas and models agree.
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

ID_MAX = 128
"""Job and device ids."""
CHECKIN_ID_MAX = 64
"""A check-in's event id: an assignment names it (`checkin_id`) and embeds it in its own id
(`asg:<checkin id>:<job>:<round>`, unique per check-in and round)."""
EVENT_ID_MAX = 256
TEXT_MAX = 1024
URL_MAX = 2048
ATTR_NAME_MAX = 64
ATTRS_MAX = 32
"""Attributes a device reports, or thresholds a requirement sets."""
BATCH_MAX = 1024
"""Items in one batch event (check-ins, assignments, declined check-in ids)."""
DEMAND_MAX = 100_000
"""Devices per round (D): far above any FL round, far below int32."""
ROUNDS_MAX = 100_000
INDEX_MAX = 2**31 - 1
"""Round attempt index: a Postgres integer."""
TIME_MAX = 1e11
"""Seconds: a wall-clock epoch time (year ~5100) or a trace time."""
DURATION_MAX = 1e9
"""Seconds: about 31 years."""
MEASURE_MAX = 1e12
"""Attribute values and thresholds (RAM in bytes fits)."""
SPEED_MAX = 1e7
"""Milliseconds per sample."""
BANDWIDTH_MAX = 1e9
"""kbit/s."""
ORIGINAL_PREFIX_MAX = 4096
"""Bytes of a bad message a dead letter keeps (base64-encoded in it), with its size and hash."""

# No control characters, no whitespace, nothing invisible or direction-changing (Unicode
# format controls: U+202E shows "abc" as "cba" on a dashboard or a terminal): safe as a
# Kafka key, a URL segment, a varchar and a name shown to an operator.
_INVISIBLE = (
    r"\u00a0\u00ad\u034f\u061c\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f"
    r"\u2000-\u200f\u2028-\u202f\u205f-\u206f\u2800\u3000\u3164\ufe00-\ufe0f\ufeff"
    r"\uffa0\ufff9-\ufffb\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
"""Characters an id may not hold: invisible ones (format, default-ignorable: the combining
grapheme joiner U+034F, the Khmer inherent vowels, the Mongolian and other variation
selectors, the tag characters U+E0000-E0FFF that spell hidden text, musical formatting),
blanks (Unicode spaces, the Braille blank U+2800, the Hangul fillers), and the direction
controls. Issue 34, item 11: tags, U+034F, U+17B4 and U+2800 were still accepted."""
_ID_PATTERN = rf"^[^\x00-\x20\x7f-\x9f{_INVISIBLE}]+$"
FORBIDDEN_IN_ID = re.compile(rf"[\x00-\x20\x7f-\x9f{_INVISIBLE}]")
"""A character an id may not hold (the class `_ID_PATTERN` excludes), for fast paths."""
# Free text: no control characters (Postgres text refuses NUL; logs and terminals the rest).
_TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
_ATTR_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]*$"

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=ID_MAX, pattern=_ID_PATTERN)]
EventId = Annotated[str, msgspec.Meta(min_length=1, max_length=EVENT_ID_MAX, pattern=_ID_PATTERN)]
CheckinId = Annotated[
    str, msgspec.Meta(min_length=1, max_length=CHECKIN_ID_MAX, pattern=_ID_PATTERN)
]
Text = Annotated[str, msgspec.Meta(max_length=TEXT_MAX, pattern=_TEXT_PATTERN)]
Url = Annotated[str, msgspec.Meta(max_length=URL_MAX, pattern=_ID_PATTERN)]
AttrName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=ATTR_NAME_MAX, pattern=_ATTR_PATTERN)
]
Measure = Annotated[float, msgspec.Meta(ge=-MEASURE_MAX, le=MEASURE_MAX)]
Attrs = Annotated[dict[AttrName, Measure], msgspec.Meta(max_length=ATTRS_MAX)]
DeviceAttrs = Annotated[
    dict[AttrName, Annotated[float, msgspec.Meta(ge=0, le=MEASURE_MAX)]],
    msgspec.Meta(max_length=ATTRS_MAX),
]
"""What a device reports of itself (RAM, cores, battery, ...): a quantity, never negative."""
Demand = Annotated[int, msgspec.Meta(ge=1, le=DEMAND_MAX)]
Count = Annotated[int, msgspec.Meta(ge=0, le=DEMAND_MAX)]
"""Devices counted in one round (assigned, results)."""
Rounds = Annotated[int, msgspec.Meta(ge=1, le=ROUNDS_MAX)]
RoundCount = Annotated[int, msgspec.Meta(ge=0, le=INDEX_MAX)]
RoundIndex = Annotated[int, msgspec.Meta(ge=0, le=INDEX_MAX)]
Priority = Annotated[int, msgspec.Meta(ge=-1000, le=1000)]
"""A job's priority class inside its tenant (higher first; venn.core.tenants)."""
SignedIndex = Annotated[int, msgspec.Meta(ge=-1, le=INDEX_MAX)]
"""A round index or label where -1 means none yet."""
Total = Annotated[int, msgspec.Meta(ge=0, le=ROUNDS_MAX * DEMAND_MAX)]
"""Devices over a job's life (every round's demand at most)."""
Offset = Annotated[int, msgspec.Meta(ge=-1, le=2**63 - 1)]
Partition = Annotated[int, msgspec.Meta(ge=-1, le=INDEX_MAX)]
Size = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Timestamp = Annotated[float, msgspec.Meta(ge=0, le=TIME_MAX)]
Duration = Annotated[float, msgspec.Meta(ge=0, le=DURATION_MAX)]
Delay = Annotated[float, msgspec.Meta(ge=-DURATION_MAX, le=DURATION_MAX)]
"""Seconds between two clock readings (two hosts' clocks may disagree: signed)."""
Ratio = Annotated[float, msgspec.Meta(ge=0, le=1)]
PosDuration = Annotated[float, msgspec.Meta(gt=0, le=DURATION_MAX)]
Speed = Annotated[float, msgspec.Meta(ge=0, le=SPEED_MAX)]
Bandwidth = Annotated[float, msgspec.Meta(ge=0, le=BANDWIDTH_MAX)]
TopicName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._\-]+$")
]
TOKEN_MAX = 4096
Token = Annotated[str, msgspec.Meta(max_length=TOKEN_MAX, pattern=r"^[A-Za-z0-9._\-]+$")]
"""A signed API token (a JWT: base64url parts joined by dots)."""
Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$")]
Base64 = Annotated[
    str, msgspec.Meta(max_length=(ORIGINAL_PREFIX_MAX + 2) // 3 * 4, pattern=r"^[A-Za-z0-9+/=]*$")
]
