"""No import circles among the project's modules (venn, services, devtools, bench, loadtest).

Every import counts: at module level, inside a function and under ``TYPE_CHECKING``. A
circle broken only by importing late (in a function) or for the type checker only still
ties its modules into one: none of them can be understood, tested or moved alone, and the
order Python happens to load them in decides whether the import works. An edge goes from a
module to each module it names (``from a.b import c`` names ``a.b.c`` when that is a
module, else ``a.b``); a package's ``__init__`` is a module like the others.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("venn", "services", "devtools", "bench", "loadtest")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def named_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The project modules ``source`` (the text of ``module``) imports, wherever it does."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            subs = [f"{base}.{alias.name}" for alias in node.names]
            targets = [s for s in subs if s in known] or [base]
            if len(targets) < len(subs):  # names that are not modules come from base itself
                targets.append(base)
        else:
            continue
        found.update(t for t in targets if t in known)
    found.discard(module)
    return found


def import_graph(tops: Iterable[str] = TOPS) -> dict[str, set[str]]:
    paths = [p for top in tops for p in sorted((ROOT / top).rglob("*.py"))]
    known = {module_name(p) for p in paths}
    return {
        module_name(p): named_modules(p.read_text(), module_name(p), p.name == "__init__.py", known)
        for p in paths
    }


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_imports_itself_back() -> None:
    assert circles(import_graph()) == []


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        (  # at module level
            {"a/x.py": "from a import y", "a/y.py": "import a.x"},
            [["a.x", "a.y"]],
        ),
        (  # through a late import and one for the type checker only, over three modules
            {
                "a/x.py": "def f():\n    from a.y import g",
                "a/y.py": "import typing\nif typing.TYPE_CHECKING:\n    from a.z import Z",
                "a/z.py": "from . import x",
            },
            [["a.x", "a.y", "a.z"]],
        ),
        (  # a package's __init__ naming a module that names the package
            {"a/__init__.py": "from a.x import f", "a/x.py": "from a import g"},
            [["a", "a.x"]],
        ),
        (  # a chain is no circle
            {"a/x.py": "from a import y", "a/y.py": "from a import z", "a/z.py": ""},
            [],
        ),
    ],
)
def test_the_finder_finds_what_it_should(
    sources: dict[str, str], expected: list[list[str]]
) -> None:
    known = {module_name(ROOT / p) for p in sources}
    graph = {
        module_name(ROOT / p): named_modules(
            text, module_name(ROOT / p), p.endswith("__init__.py"), known
        )
        for p, text in sources.items()
    }
    assert circles(graph) == expected
