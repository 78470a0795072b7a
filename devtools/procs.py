"""CPU time of processes and process trees, from /proc: what benchmarks and the load test
measure instead of wall time on a shared machine."""

from __future__ import annotations

import os
from pathlib import Path


def proc_cpu_s(stat: str, ticks_per_s: int) -> float:
    """User + system CPU seconds from the text of /proc/<pid>/stat (fields 14 and 15; the
    command name, field 2, may hold spaces and parentheses, hence the split at its end)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


def parent_of(stat: str) -> int:
    """The parent pid from the text of /proc/<pid>/stat."""
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    """``root`` and every process below it, given pid -> parent pid."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


def proc_cpu(pid: int | None) -> float:
    """User + system CPU seconds of a process (0 if it is gone or None)."""
    if pid is None:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    return proc_cpu_s(stat, os.sysconf("SC_CLK_TCK"))


def process_cpu(roots: list[int]) -> float:
    """CPU seconds of ``roots`` and their descendants now."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text()
            except OSError:
                continue
    parents = {pid: parent_of(s) for pid, s in stats.items()}
    pids: set[int] = set()
    for root in roots:
        pids |= descendants(root, parents)
    return sum(proc_cpu_s(stats[p], ticks) for p in pids if p in stats)
