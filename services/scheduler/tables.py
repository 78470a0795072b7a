"""The scheduler's Faust tables store their rows as JSON and read them back with
`RowCodec`, which never raises: a changelog record that is not a row (not UTF-8, not JSON,
nested past the parser's limit, or one that Faust would rebuild as one of its models)
comes back as `UNREADABLE`, and the state skips and counts it (`SchedulerState`).

Faust decodes a changelog record before any Venn code sees it; one that failed to decode
stopped table recovery for good, so a worker never became ready again (issue 26)."""

from __future__ import annotations

from typing import Any

import faust
from faust.serializers import codecs

CODEC = "venn_row"
UNREADABLE = "\x00unreadable"
"""What a key or value that is not a row reads back as."""


class RowCodec(codecs.json):  # type: ignore[misc]
    def _loads(self, s: bytes) -> Any:
        try:
            value = super()._loads(s)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return UNREADABLE
        if isinstance(value, dict) and "__faust" in value:
            return UNREADABLE  # Faust would look it up as a model of its registry
        return value


codecs.register(CODEC, RowCodec())


class RowTable(faust.Table):  # type: ignore[misc]
    """A table whose keys and values go through `RowCodec`."""

    def _serializer_from_type(self, typ: Any) -> str:
        return CODEC


def readable(key: object, row: object) -> bool:
    """False for a row that did not decode (its key or its value)."""
    return isinstance(key, str) and key != UNREADABLE and isinstance(row, dict)
