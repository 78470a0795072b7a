"""One home for settings: only venn/settings.py reads a VENN_ variable from the environment.

Every other module takes its configuration from `venn.settings.Settings` (a section of it
for a component's own options). Product code (venn, services, devtools, bench, loadtest, migrations)
reads no VENN_ variable at all; a test may read a knob of the test harness
(VENN_TEST_BROKER_KIND, VENN_REQUIRE_COMPOSE) but not a setting.
"""

from __future__ import annotations

import ast
from pathlib import Path

from venn.settings import describe

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "venn" / "settings.py"
PRODUCT = ("venn", "services", "devtools", "bench", "loadtest", "migrations")
SETTINGS = frozenset(d.env for d in describe())
READERS = ("get", "pop", "setdefault", "getenv")


PROCESS_ENV = ("os.environ", "environ")
ENV_NAMES = (*PROCESS_ENV, "env", "environment")
"""In product code, also the names a module binds the environment to (``env = os.environ
if environ is None else environ``); a test's ``env`` is often a mapping of its own."""


def venn_constants(source: str) -> dict[str, str]:
    """Module-level ``NAME = "VENN_..."`` constants (a variable's name kept in a constant)."""
    found = {}
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and node.value.value.startswith("VENN_")
        ):
            found[node.targets[0].id] = node.value.value
    return found


def environment_reads(
    source: str,
    constants: dict[str, str] | None = None,
    env_names: tuple[str, ...] = ENV_NAMES,
) -> list[tuple[int, str]]:
    """(line, variable) of every read of a VENN_ variable from the process environment:
    ``os.environ.get("VENN_X")``, ``os.environ["VENN_X"]``, ``os.getenv("VENN_X")``,
    ``"VENN_X" in os.environ``, also through a mapping named ``env`` or ``environ`` and with
    the name in a constant (``constants``, and this module's own)."""
    known = {**(constants or {}), **venn_constants(source)}

    def _is_environ(node: ast.AST) -> bool:
        return ast.unparse(node) in env_names

    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[ast.expr] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func
            reads = target.attr in READERS and _is_environ(target.value)
            if reads or ast.unparse(target) == "os.getenv":
                names = node.args[:1]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "getenv":
            names = node.args[:1]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _is_environ(node.value):
                names = [node.slice]
        elif isinstance(node, ast.Compare):
            membership = any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            if membership and any(_is_environ(c) for c in node.comparators):
                names = [node.left]
        for name in names:
            value = name.value if isinstance(name, ast.Constant) else None
            if isinstance(name, ast.Name):
                value = known.get(name.id)
            if isinstance(value, str) and value.startswith("VENN_"):
                found.append((name.lineno, value))
    return found


def python_files(*tops: str) -> list[Path]:
    return [p for top in tops for p in sorted((ROOT / top).rglob("*.py")) if p != HOME]


def product_constants() -> dict[str, str]:
    return {k: v for p in python_files(*PRODUCT) for k, v in venn_constants(p.read_text()).items()}


def test_product_code_reads_no_venn_variable_outside_settings() -> None:
    constants = product_constants()
    reads = {
        str(p.relative_to(ROOT)): found
        for p in python_files(*PRODUCT)
        if (found := environment_reads(p.read_text(), constants))
    }
    assert reads == {}, "read these through venn.settings (a field declared once, with its doc)"


def test_no_test_reads_a_setting_from_the_environment() -> None:
    reads = {
        str(p.relative_to(ROOT)): found
        for p in python_files("tests")
        if (
            found := [
                r
                for r in environment_reads(p.read_text(), env_names=PROCESS_ENV)
                if r[1] in SETTINGS
            ]
        )
    }
    assert reads == {}


def test_the_settings_module_is_where_they_are_read() -> None:
    """The check sees the reads it forbids (so the two tests above can fail)."""
    source = (
        "import os\nfrom os import environ, getenv\n"
        'a = os.environ.get("VENN_A")\nb = os.environ["VENN_B"]\nc = os.getenv("VENN_C")\n'
        'd = "VENN_D" in os.environ\ne = environ.get("VENN_E", "")\nf = getenv("VENN_F")\n'
        'os.environ["VENN_G"] = "1"\nh = os.environ.get("HOME")\n'
        'NAME = "VENN_H"\ndef f(environ=None):\n'
        "    env = os.environ if environ is None else environ\n"
        "    return env.get(NAME), os.environ.get(OTHER)\n"
    )
    assert [name for _, name in environment_reads(source, {"OTHER": "VENN_I"})] == [
        "VENN_A",
        "VENN_B",
        "VENN_C",
        "VENN_D",
        "VENN_E",
        "VENN_F",
        "VENN_H",
        "VENN_I",
    ]
    assert "os.environ" in HOME.read_text()
