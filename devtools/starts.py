"""A log of what the launchers start: one JSON line per broker node, Tansu or PostgreSQL
server started, appended to the file ``DEVTOOLS_STARTS`` names (nothing without it).

The test session names one (tests/conftest.py) and prints the counts at its end, so that
a CI run says how many brokers and databases it started, and for which tests.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

ENV = "DEVTOOLS_STARTS"
BY = "DEVTOOLS_STARTED_BY"
"""Who starts, when it is not the current test (a session fixture says "session")."""
KINDS = ("kafka", "tansu", "postgres")


def note_start(kind: str, what: str) -> None:
    """Append a start of ``kind`` (kafka: one node, tansu, postgres) to the log, if any."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = {
        "kind": kind,
        "what": what,
        "pid": os.getpid(),
        "test": os.environ.get(BY) or os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
        "time": time.time(),
    }
    with open(path, "a") as out:  # one short write: appends of several processes stay whole
        out.write(json.dumps(line) + "\n")


def read_starts(path: str | Path) -> list[dict[str, object]]:
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def count_starts(path: str | Path) -> Counter[str]:
    """Starts per kind in the log at ``path``."""
    return Counter(str(entry["kind"]) for entry in read_starts(path))
