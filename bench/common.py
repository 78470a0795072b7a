"""What every benchmark shares: its preamble, the metadata of a run, and the generated
blocks of the docs/results pages.

Run a benchmark from the checkout as a module: ``.venv/bin/python -m bench.<name>``
(``make bench`` lists them all). Each compares against a baseline measured in the same run
and says the machine's load beside its figures: this machine is shared.
"""

from __future__ import annotations

import datetime
import logging
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
"""The generated pages; raw figures in RESULTS / "bench"."""
QUIET = ("faust", "mode", "aiokafka", "kafka")
"""Loggers that build debug records even at warn level (their CPU would be measured)."""


def preamble(name: str) -> dict[str, Any]:
    """Start a benchmark: quiet the frameworks' loggers, print what it runs on (commit,
    load, cores) and return the run's metadata (`run_metadata`) to finish and publish."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    for logger in QUIET:
        logging.getLogger(logger).setLevel(logging.WARNING)
    meta = run_metadata(name)
    print(
        f"{name}: commit {meta['commit']}, {meta['cpus']} cores, load average "
        f"{meta['loadavg_start']} at the start",
        flush=True,
    )
    return meta


def run_metadata(name: str, **extra: Any) -> dict[str, Any]:
    """Where and when a measurement was made: the benchmark, the commit, the machine, the
    load at its start (`finish` adds the end's and the wall time)."""
    return {
        "bench": name,
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "loadavg_start": round(os.getloadavg()[0], 2),
        "started": time.monotonic(),
        "command": " ".join(["python -m", f"bench.{name}", *sys.argv[1:]]),
        **extra,
    }


def finish(meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata with the load at the end and the wall time (the start's clock dropped)."""
    out = {k: v for k, v in meta.items() if k != "started"}
    out["loadavg_end"] = round(os.getloadavg()[0], 2)
    out["wall_s"] = round(time.monotonic() - meta["started"], 1)
    return out


def git_commit() -> str:
    """The short commit of this checkout, marked ``+changes`` when tracked files differ."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" +changes" if dirty else "")


def write_block(page: Path, name: str, text: str, title: str) -> None:
    """Replace the block ``name`` of ``page`` with ``text``; a missing page is created with
    ``title`` and the block, a page without the block gets it appended. Everything outside
    the block is hand-written and kept."""
    begin, end = f"<!-- bench:{name} begin -->", f"<!-- bench:{name} end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if not page.exists():
        page.write_text(f"# {title}\n\n{block}\n")
        return
    doc = page.read_text()
    if begin not in doc:
        page.write_text(f"{doc.rstrip()}\n\n{block}\n")
        return
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{block}{tail}")
