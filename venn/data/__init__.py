"""Packaged reference data (job templates, workloads, device lists) and its lookup.

The workload YAMLs of the paper name their companion files by upstream paths such as
``trace/aibenchmark_eligibility_4`` or ``config/job_config_random_eli.yml``; those paths
do not exist here, so every lookup resolves by *base name*, with or without extension.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

DATA_DIR: Path = Path(__file__).resolve().parent

_EXTENSIONS: tuple[str, ...] = (".json", ".yml", ".yaml", ".csv", ".txt")


def _candidates(name: str) -> list[str]:
    base = Path(name).name
    names = [base]
    stem, suffix = Path(base).stem, Path(base).suffix
    if suffix in _EXTENSIONS:
        names.append(stem)
    else:
        names.extend(base + ext for ext in _EXTENSIONS)
    return names


def find_in_dir(name: str, directory: Path) -> Path | None:
    """The file of ``directory`` (not recursive) whose name is ``name``'s base name.

    ``trace/x``, ``x`` and ``x.json`` all find ``directory/x.json`` (or ``directory/x``).
    """
    for candidate in _candidates(name):
        path = directory / candidate
        if path.is_file():
            return path
    return None


def find_data_file(name: str, search_dirs: Iterable[Path] = ()) -> Path | None:
    """Resolve ``name`` by base name: first in ``search_dirs`` in order, then in the data.

    The packaged data is searched recursively in sorted order, so the answer is
    deterministic; returns None when nothing matches.
    """
    for directory in search_dirs:
        found = find_in_dir(name, Path(directory))
        if found is not None:
            return found
    wanted = set(_candidates(name))
    for path in sorted(DATA_DIR.rglob("*")):
        if path.is_file() and path.name in wanted and path.suffix != ".py":
            return path
    return None


def data_file(name: str) -> Path:
    """Like :func:`find_data_file` on the packaged data only, raising when absent."""
    found = find_data_file(name)
    if found is None:
        raise FileNotFoundError(f"no packaged data file named {Path(name).name!r}")
    return found
