"""Every image docker-compose.yml needs, built on this machine without a registry pull
(`make compose-images`), for the upstream images' contracts:

- base: Debian bookworm from `debootstrap --variant=minbase`, `docker import`ed, trusting
  the certificate authorities the host added (/usr/local/share/ca-certificates);
- python: Python 3.11 from Debian's packages, the Dockerfile's BASE (python:3.11-slim);
- venn: the project's Dockerfile on it (compose's `build` then finds every layer cached);
- kafka: apache/kafka, from the Maven Central jars of devtools/kafka-pom.xml (kafka/);
- postgres: postgres, from Debian's packages (postgres/);
- prometheus: prom/prometheus, from Debian's package (prometheus/).
Grafana has no Debian package: none is built (the metrics profile runs without it).

Each image is tagged venn-compose/NAME:VERSION-HASH, HASH over its inputs (its folder, its
base's tag, its build context), so a run that finds the tag builds nothing; a new tag
replaces the older ones of the same image. Prints the compose variables that select them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ops.compose.engine import EngineError, docker, engine

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REPO = "venn-compose"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
HOST_CAS = Path("/usr/local/share/ca-certificates")
# What the base image is, besides debootstrap's minbase: updates and security updates, no
# recommends, no service starts in package scripts, no apt caches.
BASE_SETUP = f"""\
cat > /etc/apt/sources.list <<EOF
deb {MIRROR} {SUITE} main
deb {MIRROR} {SUITE}-updates main
deb http://deb.debian.org/debian-security {SUITE}-security main
EOF
printf 'APT::Install-Recommends "false";\\n' > /etc/apt/apt.conf.d/90no-recommends
printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
update-ca-certificates
apt-get clean && rm -rf /var/lib/apt/lists/*
"""
BASE_CHANGES = ("ENV LANG=C.UTF-8", 'CMD ["bash"]')
# The Dockerfile's context (.dockerignore keeps only these): the Venn image's inputs.
VENN_INPUTS = (
    "Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "alembic.ini",
    "venn", "services", "schemas", "migrations",
)  # fmt: skip
SKIPPED = re.compile(r"(^|/)(__pycache__|[^/]*\.egg-info)(/|$)|\.py[co]$")
KAFKA_TOOLS = """\
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>${kafka.version}</version>
    </dependency>
  </dependencies>"""


@dataclass(frozen=True)
class Built:
    variable: str
    """The compose variable that selects the image."""
    tag: str
    seconds: float
    """Time spent building it in this run (0 when it was there)."""


def digest(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:12]


def tree(paths: Iterable[Path], root: Path) -> list[bytes | str]:
    """Each file under paths: its path relative to root, whether it is executable, its bytes."""
    files = []
    for path in paths:
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [p for p in found if not SKIPPED.search(p.relative_to(root).as_posix())]
    out: list[bytes | str] = []
    for f in sorted(files):
        out += [f.relative_to(root).as_posix(), str(os.access(f, os.X_OK)), f.read_bytes()]
    return out


def exists(tag: str) -> bool:
    try:
        docker("image", "inspect", tag, timeout=60)
    except EngineError:
        return False
    return True


def replace_older(tag: str) -> None:
    """Remove the other tags of this image's repository (older builds)."""
    repository = tag.rsplit(":", 1)[0]
    listed = docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", repository)
    older = [t for t in listed.split() if t != tag and not t.endswith(":<none>")]
    if older:
        docker("image", "rm", *older)


def run_logged(command: list[str], log: Path, stdin: IO[bytes] | None = None) -> None:
    """Run command with its output in log; on failure, raise with the log's tail."""
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(
            command, stdin=stdin, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise EngineError(f"{' '.join(command[:3])} failed ({done.returncode}); {log}:\n{tail}")


def base(log: Path) -> tuple[str, float]:
    """The debootstrap base image."""
    cas = sorted(HOST_CAS.glob("*.crt")) if HOST_CAS.is_dir() else []
    tag = f"{REPO}/base:{SUITE}-{digest([SUITE, MIRROR, BASE_SETUP, *tree(cas, HOST_CAS)])}"
    if exists(tag):
        return tag, 0.0
    for tool in ("debootstrap", "chroot", "tar"):
        if shutil.which(tool) is None:
            raise EngineError(f"{tool} is needed for the base image (apt-get install {tool})")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="venn-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run_logged(
            ["debootstrap", "--variant=minbase", "--include=ca-certificates", SUITE,
             str(rootfs), MIRROR],
            log,
        )  # fmt: skip
        for ca in cas:
            shutil.copy(ca, rootfs / "usr/local/share/ca-certificates" / ca.name)
        run_logged(["chroot", str(rootfs), "/bin/sh", "-ec", BASE_SETUP], log)
        changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
        archive = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE
        )
        try:
            run_logged(["docker", "import", *changes, "-", tag], log, stdin=archive.stdout)
        finally:
            assert archive.stdout is not None
            archive.stdout.close()
            archive.wait()
    replace_older(tag)
    return tag, time.monotonic() - started


def tag_for(name: str, version: str, inputs: list[bytes | str], args: dict[str, str]) -> str:
    """The image's tag: its version and the hash of its inputs and build args."""
    key = digest([*inputs, *sorted(f"{k}={v}" for k, v in args.items())])
    return f"{REPO}/{name}:{version}-{key}"


def build(
    name: str, version: str, context: Path, inputs: list[bytes | str], log: Path, **args: str
) -> tuple[str, float]:
    """`docker build` of context, unless the tag of its inputs is here already."""
    tag = tag_for(name, version, inputs, args)
    if exists(tag):
        return tag, 0.0
    started = time.monotonic()
    build_args = [arg for k, v in args.items() for arg in ("--build-arg", f"{k}={v}")]
    run_logged(["docker", "build", "--pull=false", *build_args, "-t", tag, str(context)], log)
    replace_older(tag)
    return tag, time.monotonic() - started


def kafka_image(base_tag: str, log: Path) -> tuple[str, float]:
    """apache/kafka's contract on the project's Kafka release; its jars fetched by Maven."""
    from devtools.kafka import POM, kafka_version

    pom = POM.read_text().replace("  </dependencies>", KAFKA_TOOLS)
    assert "kafka-tools" in pom, "devtools/kafka-pom.xml: no </dependencies> to extend"
    folder = HERE / "kafka"
    inputs = [pom, *tree([folder], folder)]
    if exists(tag := tag_for("kafka", kafka_version(), inputs, {"BASE": base_tag})):
        return tag, 0.0
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EngineError("mvn is needed for the Kafka image's jars (apt-get install maven)")
    with tempfile.TemporaryDirectory(prefix="venn-kafka-image-") as tmp:
        context = Path(tmp) / "context"
        shutil.copytree(folder, context)
        (Path(tmp) / "pom.xml").write_text(pom)
        run_logged(
            [mvn, "-q", "-B", "-f", str(Path(tmp) / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={context / 'libs'}", "-DincludeScope=runtime"],
            log,
        )  # fmt: skip
        return build("kafka", kafka_version(), context, inputs, log, BASE=base_tag)


def build_all(log: Path) -> list[Built]:
    """Every image, in dependency order; the engine must be running."""
    built: list[Built] = []

    def add(variable: str, made: tuple[str, float]) -> str:
        built.append(Built(variable, *made))
        return made[0]

    base_tag = add("", base(log))
    python = HERE / "python"
    python_tag = add(
        "VENN_PYTHON_IMAGE",
        build("python", "3.11", python, tree([python], python), log, BASE=base_tag),
    )
    venn_inputs = tree([ROOT / p for p in VENN_INPUTS], ROOT)
    add("", build("venn", "local", ROOT, venn_inputs, log, BASE=python_tag))
    add("VENN_KAFKA_IMAGE", kafka_image(base_tag, log))
    for name, variable, version in (
        ("postgres", "VENN_POSTGRES_IMAGE", "15"),
        ("prometheus", "VENN_PROMETHEUS_IMAGE", "debian"),
    ):
        folder = HERE / name
        add(variable, build(name, version, folder, tree([folder], folder), log, BASE=base_tag))
    return built


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="venn-compose-images-") as tmp:
        log = Path(tmp) / "build.log"
        try:
            with engine(Path(tmp)):
                built = build_all(log)
        except EngineError as exc:
            print(f"compose-images: {exc}", file=sys.stderr)
            return 1
    for image in built:
        how = f"built in {image.seconds:.0f} s" if image.seconds else "cached"
        print(f"# {image.tag}: {how}")
    for image in built:
        if image.variable:
            print(f"{image.variable}={image.tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
