"""The import layers: the library (venn/) does not reach into the services (services/) or the
launchers (devtools/), the services do not reach into the launchers or the CLI, and the pure
core and the simulator import no I/O layer. Every import counts, at module level or inside a
function.

- A service (services/<name>/) is used from outside only through its published API: its
  package, ``services.<name>``, and the names in its ``__all__``. The library imports no
  service; the launchers (devtools/), which run the services, import them only so.
- ``venn`` never imports ``devtools``, with one exception, the boundary of
  docs/architecture.md: the CLI's stack commands (``venn.cli.stack_commands``: `venn up`,
  `venn demo`) import it inside the command functions, never at module level, so that
  importing the library (or the CLI) loads no launcher.
- The services import the library, never ``devtools`` or ``venn.cli`` (which sit above
  them), and another service only through its published API.
- ``venn.core`` (no I/O, no clock) imports only itself and the event models; the simulator
  only the core, the traces, the workloads and the packaged data.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = ("devtools",)
ABOVE_SERVICES = ("devtools", "venn.cli")
CLI_STACK_COMMANDS = "venn.cli.stack_commands"
"""The one module of the library that may import devtools, inside its command functions."""
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
    lazy: bool = False  # inside a function (run when it is called, not at import)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_in(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import in ``source``, the text of ``module`` (relative imports resolved),
    wherever it is in the module."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    in_function = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        lazy = id(node) in in_function
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name, (), lazy) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = tuple(alias.name for alias in node.names)
            found.append(Import(module, node.lineno, base, names, lazy))
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
        if within(i.module, ("venn",)) and within(i.target, ("services",)):
            out.append(f"{where}: the library imports no service")
        if within(i.module, LAUNCHERS) and service_of(i.target) and not through_published_api(i):
            out.append(f"{where}: only a service's package API ({service_of(i.target)})")
        if within(i.module, ("venn",)) and within(i.target, LAUNCHERS):
            if i.module != CLI_STACK_COMMANDS:
                out.append(f"{where}: the library imports no launcher (devtools)")
            elif not i.lazy:
                out.append(f"{where}: only inside a command function (the CLI's boundary)")
        if own is not None:
            if within(i.target, ABOVE_SERVICES):
                out.append(f"{where}: a service imports nothing of the launchers or the CLI")
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
    assert violations(all_imports("venn", "services", "devtools")) == []


def test_importing_the_library_loads_no_launcher() -> None:
    """`import venn.broker` (every service does) and the CLI load nothing of devtools: no JVM
    launcher, no embedded database."""
    code = (
        "import sys, venn.broker, venn.broker.security, venn.settings, venn.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'devtools'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


def test_the_topic_preparation_has_one_home() -> None:
    defined = [
        module_name(p)
        for top in ("venn", "services", "devtools", "bench", "loadtest")
        for p in sorted((ROOT / top).rglob("*.py"))
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
        and node.name in ("prepare_topics", "changelog_topics", "scheduler_topics")
    ]
    assert defined == ["venn.broker.prepare"]


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("venn/core/x.py", "from venn.broker import topics", "venn.core imports only"),
        ("venn/sim/x.py", "def f():\n    from venn.broker import topics", "venn.sim imports only"),
        ("venn/report/x.py", "from services.devices import run_devices", "imports no service"),
        ("venn/stack/x.py", "from services.devices import run_devices", "imports no service"),
        ("venn/broker/x.py", "def f():\n    from devtools import kafka", "no launcher"),
        ("venn/cli/stack_commands.py", "from devtools.stack import local", "inside a command"),
        ("venn/cli/stack_commands.py", "def up():\n    from devtools.stack import local", None),
        ("devtools/stack/x.py", "from services.scheduler.app import TABLES", "package API"),
        ("devtools/stack/x.py", "from services.devices import DeviceFleet", None),
        ("services/coordinator/x.py", "from devtools.stack.demo import run_demo", "the launchers"),
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


BENCH_SHARED = ("bench.common", "bench.gateway_load")
"""What benchmarks share; every other module of bench/ is a benchmark (or `make bench`)."""


def test_benchmarks_are_a_package_that_shares_only_its_common_modules() -> None:
    """No benchmark imports another or patches sys.path; no test imports a benchmark."""
    problems = []
    for i in all_imports("bench", "tests"):
        if within(i.target, ("bench",)) and i.target != "bench":
            if within(i.target, BENCH_SHARED) or i.module == "bench.run_all":
                continue
            problems.append(f"{i.module}:{i.line} imports {i.target}: share through bench.common")
    for path in sorted((ROOT / "bench").rglob("*.py")):
        if "sys.path" in path.read_text():
            problems.append(f"{module_name(path)} edits sys.path: run it as python -m bench.<name>")
    assert problems == []


def defined_names(tree: ast.AST) -> set[str]:
    """Every name a module defines: functions, classes, methods, attributes, variables."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def test_no_benchmark_or_load_test_uses_a_service_private_name() -> None:
    """A ``_name`` a service defines is used nowhere in bench/ or loadtest/ (their own
    ``_names``, a subclass's included, apart)."""
    private = {
        n
        for path in (ROOT / "services").rglob("*.py")
        for n in defined_names(ast.parse(path.read_text()))
        if n.startswith("_") and not n.startswith("__")
    }
    problems = []
    for top in ("bench", "loadtest"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text())
            theirs = private - defined_names(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in theirs:
                    problems.append(f"{module_name(path)}:{node.lineno} uses .{node.attr}")
                elif isinstance(node, ast.ImportFrom) and within(node.module or "", ("services",)):
                    problems += [
                        f"{module_name(path)}:{node.lineno} imports {alias.name}"
                        for alias in node.names
                        if alias.name.startswith("_")
                    ]
    assert problems == []


def core_data_attributes() -> set[str]:
    """What `venn.core.scheduler.Scheduler` keeps in its instance: its data structures."""
    tree = ast.parse((ROOT / "venn" / "core" / "scheduler.py").read_text())
    init = next(
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "Scheduler"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    return {
        node.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


READABLE_CORE = {"compiles", "policy", "seed", "tiers"}
"""Counters and settings a service may read off the core (tiers: whether it matches)."""


def core_reads(source: str, where: str, forbidden: set[str]) -> list[str]:
    """Where ``source`` reads a core scheduler's data off an object named ``core``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        named = (isinstance(owner, ast.Name) and owner.id == "core") or (
            isinstance(owner, ast.Attribute) and owner.attr == "core"
        )
        if named and (node.attr in forbidden or node.attr.startswith("_")):
            out.append(f"{where}:{node.lineno} reads core.{node.attr}")
    return out


def test_services_read_the_core_through_its_methods_only() -> None:
    forbidden = core_data_attributes() - READABLE_CORE
    assert {"jobs", "active_devices", "by_idx", "index"} <= forbidden
    found = [
        problem
        for path in sorted((ROOT / "services").rglob("*.py"))
        for problem in core_reads(path.read_text(), str(path.relative_to(ROOT)), forbidden)
    ]
    assert found == []
    assert core_reads("x = state.core.jobs['j']", "x", forbidden) == ["x:1 reads core.jobs"]


CLASS_MAX_LINES = 300
SMALL_CLASSES = ("services/scheduler",)
"""Packages whose classes are cut along their data (issue 32: no class over 300 lines)."""


def test_no_class_over_300_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)"
        for top in SMALL_CLASSES
        for path in sorted((ROOT / top).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > CLASS_MAX_LINES
    ]
    assert long == []
