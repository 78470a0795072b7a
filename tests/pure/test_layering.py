"""The import layers: the library (venn/) does not reach into the services (services/), the
services do not reach into the launcher or the CLI, and the pure core and the simulator
import no I/O layer. Every import counts, at module level or inside a function.

- A service (services/<name>/) is used from outside only through its published API: its
  package, ``services.<name>``, and the names in its ``__all__``. Only the local launcher
  (venn/stack), which runs the services, imports them at all from venn/.
- The services import the library, never ``venn.stack`` or ``venn.cli`` (which sit above
  them), and another service only through its published API.
- ``venn.core`` (no I/O, no clock) imports only itself and the event models; the simulator
  only the core, the traces, the workloads and the packaged data.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ("venn.stack",)
ABOVE_SERVICES = ("venn.stack", "venn.cli")
ALLOWED: dict[str, tuple[str, ...]] = {
    "venn.core": ("venn.core", "venn.events", "venn.fields"),
    "venn.sim": ("venn.core", "venn.sim", "venn.traces", "venn.workloads", "venn.data"),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    line: int
    target: str  # the imported module, dotted
    names: tuple[str, ...]  # for `from target import a, b`


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_in(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import in ``source``, the text of ``module`` (relative imports resolved),
    wherever it is in the module."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = tuple(alias.name for alias in node.names)
            found.append(Import(module, node.lineno, base, names))
    return found


def imports_of(path: Path) -> list[Import]:
    return imports_in(path.read_text(), module_name(path), path.name == "__init__.py")


def all_imports(*tops: str) -> list[Import]:
    return [i for top in tops for p in sorted((ROOT / top).rglob("*.py")) for i in imports_of(p)]


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def service_of(name: str) -> str | None:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else None


def published(service: str) -> set[str]:
    return set(getattr(importlib.import_module(service), "__all__", ()))


def through_published_api(i: Import) -> bool:
    """``from services.x import <names in its __all__>`` (or ``import services.x``)."""
    service = service_of(i.target)
    if service is None:
        return i.target == "services" and not i.names
    if i.target != service:
        return False  # a submodule: services.scheduler.app, ...
    return not i.names or set(i.names) <= published(service)


def violations(found: list[Import]) -> list[str]:
    out = []
    for i in found:
        where = f"{i.module}:{i.line} imports {i.target}" + (
            f" ({', '.join(i.names)})" if i.names else ""
        )
        own = service_of(i.module)
        if i.module.startswith("venn") and within(i.target, ("services",)):
            if not within(i.module, LAUNCHER):
                out.append(f"{where}: the library imports no service")
            elif not through_published_api(i):
                out.append(f"{where}: only a service's package API ({service_of(i.target)})")
        if own is not None:
            if within(i.target, ABOVE_SERVICES):
                out.append(f"{where}: a service imports nothing of the launcher or the CLI")
            other = service_of(i.target)
            if other is not None and other != own and not through_published_api(i):
                out.append(f"{where}: another service only through its package API")
        for layer, allowed in ALLOWED.items():
            if within(i.module, (layer,)) and i.target.startswith("venn"):
                if not within(i.target, allowed) and i.target != "venn":
                    out.append(f"{where}: {layer} imports only {', '.join(allowed)}")
                if i.target == "venn" and not set(i.names) <= {"events", "fields"}:
                    out.append(f"{where}: {layer} imports only {', '.join(allowed)}")
    return out


def test_the_layers_hold() -> None:
    assert violations(all_imports("venn", "services")) == []


def test_the_topic_preparation_has_one_home() -> None:
    defined = [
        module_name(p)
        for top in ("venn", "services", "loadtest")
        for p in sorted((ROOT / top).rglob("*.py"))
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
        and node.name in ("prepare_topics", "changelog_topics", "scheduler_topics")
    ]
    assert defined == ["venn.broker.topics"]


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("venn/core/x.py", "from venn.broker import topics", "venn.core imports only"),
        ("venn/sim/x.py", "def f():\n    from venn.stack import demo", "venn.sim imports only"),
        ("venn/report/x.py", "from services.devices import run_devices", "imports no service"),
        ("venn/stack/x.py", "from services.scheduler.app import TABLES", "package API"),
        ("venn/stack/x.py", "from services.devices import DeviceFleet", None),
        ("services/coordinator/x.py", "from venn.stack.demo import run_demo", "the launcher"),
        ("services/gateway/x.py", "from ..scheduler import state", "another service"),
        ("services/gateway/x.py", "from . import models", None),
    ],
)
def test_the_check_finds_what_it_should(module: str, source: str, expected: str | None) -> None:
    problems = violations(imports_in(source, module_name(ROOT / module)))
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems
