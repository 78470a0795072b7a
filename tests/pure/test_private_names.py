"""Faust's and aiokafka's private API is named in one module only, the seam
(`venn/broker/faust_adapter.py`): nowhere else in the product, the benchmarks or the tests.

A private name is one with a single leading underscore that faust, mode or aiokafka
define (a function, a class, an attribute they assign). Outside the seam a module may not
import one, read one off an object (``consumer._client``), or define one in a class of its
own that subclasses theirs (an override of their private method). Names the project
defines itself are its own business: ``self._lock`` of a project class is not Faust's.
"""

from __future__ import annotations

import ast
import importlib.machinery
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEAM = ROOT / "venn" / "broker" / "faust_adapter.py"
FRAMEWORKS = ("faust", "mode", "aiokafka")
SCANNED = ("venn", "services", "bench", "loadtest", "tests", "devtools", "examples")


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_names(tree: ast.AST) -> Iterator[str]:
    """Private names a module defines: functions, classes, attributes it assigns."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            yield node.attr
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            yield node.id


def sources(top: Path) -> Iterator[Path]:
    """The Python files under ``top``, less a virtual environment inside it."""
    inside = top.relative_to(ROOT).parts if top.is_relative_to(ROOT) else ()
    yield from sorted(p for p in top.rglob("*.py") if ".venv" in inside or ".venv" not in p.parts)


@cache
def framework_private() -> frozenset[str]:
    found: set[str] = set()
    for name in FRAMEWORKS:
        # Faust swaps its module object in sys.modules for one without __spec__,
        # so importlib.util.find_spec fails once any test has imported it.
        spec = importlib.machinery.PathFinder.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        for path in sources(Path(spec.origin).parent):
            tree = ast.parse(path.read_text(errors="replace"))
            found.update(n for n in defined_names(tree) if private(n))
    return frozenset(found)


@cache
def project_private() -> frozenset[str]:
    found: set[str] = set()
    for top in SCANNED:
        for path in sources(ROOT / top) if (ROOT / top).is_dir() else ():
            if path == SEAM:
                continue
            found.update(n for n in defined_names(ast.parse(path.read_text())) if private(n))
    return frozenset(found)


def from_framework(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in FRAMEWORKS


def violations(source: str, where: str) -> list[str]:
    """Where ``source`` names a private name of the frameworks."""
    tree = ast.parse(source)
    theirs = framework_private() - project_private() - set(defined_names(tree))
    imported: set[str] = set()  # names bound to something of the frameworks
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and from_framework(node.module):
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if private(alias.name) or any(private(p) for p in str(node.module).split(".")):
                    out.append(f"{where}:{node.lineno} imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if from_framework(alias.name):
                    imported.add((alias.asname or alias.name).split(".")[0])
                    if any(private(p) for p in alias.name.split(".")):
                        out.append(f"{where}:{node.lineno} imports {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and node.attr in theirs:
            out.append(f"{where}:{node.lineno} reads {node.attr}")
        elif isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name | ast.Attribute) and base_name(b) in imported for b in node.bases
        ):
            for item in node.body:
                if (
                    isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    and private(item.name)
                    and item.name in framework_private()
                ):
                    out.append(f"{where}:{item.lineno} overrides {node.name}.{item.name}")
    return out


def base_name(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def test_private_names_of_faust_and_aiokafka_live_in_the_seam_only() -> None:
    found = []
    for top in SCANNED:
        if not (ROOT / top).is_dir():
            continue
        for path in sources(ROOT / top):
            if path != SEAM:
                found += violations(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_the_seam_is_where_they_are() -> None:
    """The seam does name some (its reason to exist); if it named none, this test and the
    seam could go."""
    assert violations(SEAM.read_text(), "seam")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from faust.transport.consumer import _Thing", "imports faust.transport.consumer._Thing"),
        ("def f(c):\n    return c._client", "reads _client"),
        (
            "from faust.assignor import PartitionAssignor\n"
            "class A(PartitionAssignor):\n    def _perform_assignment(self): ...",
            "overrides A._perform_assignment",
        ),
        ("import faust\nclass T(faust.Table):\n    def on_key_set(self, k, v): ...", None),
        ("class Mine:\n    def __init__(self):\n        self._lock = 1", None),
    ],
)
def test_the_check_finds_what_it_should(source: str, expected: str | None) -> None:
    found = violations(source, "x")
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_the_frameworks_are_found_after_faust_is_imported() -> None:
    """Faust replaces its own module object on import; the scan must not depend on order."""
    import faust  # noqa: F401

    framework_private.cache_clear()
    assert "_perform_assignment" in framework_private()
