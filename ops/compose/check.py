"""`make compose-check`: docker-compose.yml built and run under a real Docker engine.

1. A Docker engine: the running one, or dockerd started here and stopped after.
2. Every image built here (ops/compose/images.py; cached by a content hash in the tag).
3. An .env made by docs/operations.md's own commands, in a scratch dir; the stack's
   published ports are free loopback ports (VENN_COMPOSE_*_PORT) so that nothing else on
   the machine is in the way.
4. `docker-compose --profile demo --profile metrics up -d --build --scale scheduler=N`
   (Grafana only if an image for it is here: it has no Debian package), then, each as a
   user would see it:
   - the demo coordinator exits 0 once, every job finished, and the audit database (from
     the host, the published Postgres port) has one row per closed round and every job
     finished;
   - the gateway, from the host through its published port, answers a device check-in
     carrying a device token minted on the host (`venn token device`) and refuses one
     without;
   - Kafka, from the host through its published port, advertises that port, refuses a
     client without credentials, and refuses the gateway's and the devices' principals the
     topics they may not write;
   - each scheduler worker (1, or `--schedulers N`) answers /metrics on its own ephemeral
     published port, exactly one decides, and they counted assignments;
   - Prometheus scrapes every Venn service;
   - no long-running service exited or was restarted.
5. `docker-compose down -v --rmi local`, after which no container, volume or network of
   the project is left.
Prints what it found and the time of each step; exits 1 on the first failed check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError
from sqlalchemy import select

from ops.compose.engine import EngineError, docker, engine
from ops.compose.images import ROOT, build_all, exists
from venn.audit.db import make_engine
from venn.audit.models import JobAudit, RoundAudit
from venn.broker import security, topics
from venn.broker.security import Credentials, client_options
from venn.net import free_port

PROJECT = "venncheck"
COMPOSE_FILE = ROOT / "docker-compose.yml"
OPERATIONS = ROOT / "docs" / "operations.md"
PORTS = ("KAFKA", "POSTGRES", "GATEWAY", "PROMETHEUS", "GRAFANA")
LONG_RUNNING = ("kafka", "postgres", "scheduler", "recorder", "gateway", "devices")
SCHEDULERS = 1
"""Scheduler workers (`--scale scheduler=N`; `--schedulers N` of this script). 2 passes as
well (one decides, one is a hot standby, each on its own published port), but under a
loaded machine its demo closes more failed rounds and takes longer: 1 in CI."""
UP_TIMEOUT_S = 900.0  # builds the Venn image when its layers are not cached
DEMO_TIMEOUT_S = 600.0
JOB_LINE = re.compile(r"^(?P<job>\S+): finished=(?P<finished>\w+) jct_s=\S+ attempts=(?P<n>\d+)$")
T = TypeVar("T")


class CheckFailed(AssertionError):
    pass


def check(ok: object, message: str) -> None:
    if not ok:
        raise CheckFailed(message)


DOCKER_CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")
"""CPU nanoseconds of every container the engine ran (cgroup v1, cgroupfs driver), build
steps included; it keeps counting what removed containers used."""


def containers_cpu_s() -> float | None:
    try:
        return int(DOCKER_CPUACCT.read_text()) / 1e9
    except (OSError, ValueError):
        return None


def own_cpu_s() -> float:
    """CPU seconds of this process and the commands it ran and waited for."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class Report:
    started: float = field(default_factory=time.monotonic)
    steps: list[tuple[str, float]] = field(default_factory=list)
    found: list[str] = field(default_factory=list)
    containers_cpu: list[float | None] = field(default_factory=list)
    """The engine's containers' CPU seconds when the engine was had, and at the end."""

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        print(f"-- {name}", flush=True)
        try:
            yield
        finally:
            self.steps.append((name, time.monotonic() - began))

    def note(self, line: str) -> None:
        print(f"   {line}", flush=True)
        self.found.append(line)

    def print(self, ok: bool) -> None:
        print(f"\ncompose-check {'passed' if ok else 'FAILED'}")
        for line in self.found:
            print(f"  {line}")
        for name, seconds in self.steps:
            print(f"  {seconds:7.1f} s  {name}")
        print(f"  {time.monotonic() - self.started:7.1f} s  in all (wall time)")
        cpu = f"CPU: {own_cpu_s():.0f} s in the check and its commands"
        start, end = [*self.containers_cpu, None, None][:2]
        if start is not None and end is not None:
            cpu += f", {end - start:.0f} s in containers"
        print(f"  {cpu} (load average {os.getloadavg()[0]:.1f})")


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, every: float = 1.0) -> T:
    """probe() until it gives a value (not None); CheckFailed naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def env_file_from_docs(where: Path) -> dict[str, str]:
    """Run the commands of docs/operations.md that write .env, in `where`; its variables."""
    blocks = re.findall(r"```bash\n(.*?)```", OPERATIONS.read_text(), re.S)
    (script,) = [b for b in blocks if "> .env" in b]
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=where, check=True)
    lines = (where / ".env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@dataclass
class Compose:
    env_file: Path
    variables: dict[str, str]
    """Images and published ports, given to docker-compose as its environment."""
    services: list[str]
    profiles: tuple[str, ...] = ("demo", "metrics")

    def run(self, *args: str, timeout: float = 300.0) -> str:
        command = ["docker-compose", "-p", PROJECT, "-f", str(COMPOSE_FILE)]
        command += ["--env-file", str(self.env_file)]
        for profile in self.profiles:
            command += ["--profile", profile]
        done = subprocess.run(
            [*command, *args],
            cwd=ROOT,
            env={**_host_env(), **self.variables},
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        out = (done.stdout + done.stderr).decode(errors="replace")
        if done.returncode != 0:
            raise CheckFailed(f"docker-compose {shlex.join(args)} exited {done.returncode}:\n{out}")
        return done.stdout.decode(errors="replace")

    def containers(self, service: str) -> list[str]:
        return self.run("ps", "-q", service).split()

    def container(self, service: str) -> str:
        ids = self.containers(service)
        check(len(ids) == 1, f"{service}: {len(ids)} containers")
        return ids[0]

    def state(self, service: str) -> dict[str, Any]:
        return state_of(self.container(service))

    def published(self, service: str, port: int, index: int = 1) -> int:
        address = self.run("port", f"--index={index}", service, str(port)).strip()
        check(address.startswith("127.0.0.1:"), f"{service}:{port} published on {address!r}")
        return int(address.rsplit(":", 1)[1])


def state_of(container: str) -> dict[str, Any]:
    """A container's State, with its RestartCount."""
    out = docker("inspect", "--format", "{{json .State}}|{{.RestartCount}}", container)
    state, _, restarts = out.strip().rpartition("|")
    return {**json.loads(state), "RestartCount": int(restarts)}


def container_log(container: str) -> str:
    """What a container wrote to stdout and stderr, in every run of it."""
    done = subprocess.run(
        ["docker", "logs", container], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        timeout=120, check=False,
    )  # fmt: skip
    return done.stdout.decode(errors="replace")


def _host_env() -> dict[str, str]:
    # The stack's settings come from the compose file and its .env, not from this shell.
    return {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}


def job_lines(text: str) -> dict[str, tuple[bool, int]]:
    """The coordinator's last word per job: (finished, closed round attempts)."""
    jobs = {}
    for line in text.splitlines():
        match = JOB_LINE.match(line.strip())
        if match:
            jobs[match["job"]] = (match["finished"] == "True", int(match["n"]))
    return jobs


def audit_rows(url: str, jobs: set[str]) -> tuple[Counter[tuple[str, int]], set[str]]:
    engine_ = make_engine(url)
    try:
        with engine_.connect() as conn:
            rounds = conn.execute(
                select(RoundAudit.job_id, RoundAudit.round_index).where(RoundAudit.job_id.in_(jobs))
            ).all()
            finished = conn.execute(
                select(JobAudit.job_id).where(
                    JobAudit.job_id.in_(jobs), JobAudit.finished_at.is_not(None)
                )
            ).all()
    finally:
        engine_.dispose()
    return Counter((r.job_id, r.round_index) for r in rounds), {r.job_id for r in finished}


def http(url: str, body: bytes | None = None, token: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


async def brokers_seen_through(bootstrap: str, creds: Credentials | None) -> list[tuple[str, int]]:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=10000, **client_options(creds)
    )
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
        return [(b["host"], b["port"]) for b in cluster["brokers"]]
    finally:
        await admin.close()


def refused(bootstrap: str, creds: Credentials | None) -> bool:
    try:
        asyncio.run(brokers_seen_through(bootstrap, creds))
    except (KafkaConnectionError, KafkaError):
        return True
    return False


async def produce(bootstrap: str, creds: Credentials, topic: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=5000, **client_options(creds)
    )
    try:
        await asyncio.wait_for(producer.start(), 15)
        await asyncio.wait_for(producer.send_and_wait(topic, b"{}"), 15)
    finally:
        await producer.stop()


def check_demo(compose: Compose, secrets: Mapping[str, str], report: Report) -> None:
    """The coordinator finishes its jobs, once; one audit row per closed round."""

    def finished() -> dict[str, Any] | None:
        state = compose.state("coordinator")
        return state if state["Status"] == "exited" or state["RestartCount"] else None

    state = wait_for(finished, DEMO_TIMEOUT_S, "the demo coordinator's exit", every=2.0)
    logs = container_log(compose.container("coordinator"))
    check(state["RestartCount"] == 0, f"the coordinator was restarted:\n{logs[-5000:]}")
    check(state["ExitCode"] == 0, f"the coordinator exited {state['ExitCode']}:\n{logs[-5000:]}")
    jobs = job_lines(logs)
    command = compose_command("coordinator")
    expected = int(command[command.index("--jobs") + 1])
    check(len(jobs) == expected and all(done for done, _ in jobs.values()), f"jobs: {jobs}")
    report.note(
        f"demo: {len(jobs)} of {expected} jobs finished, {sum(n for _, n in jobs.values())} rounds"
    )

    password = secrets["VENN_POSTGRES_PASSWORD"]
    port = compose.variables["VENN_COMPOSE_POSTGRES_PORT"]
    url = f"postgresql+psycopg://postgres:{password}@127.0.0.1:{port}/venn"
    want = Counter({(job, i): 1 for job, (_, n) in jobs.items() for i in range(n)})
    seen: list[tuple[Counter[tuple[str, int]], set[str]]] = []

    def recorded() -> bool | None:
        seen.append(audit_rows(url, set(jobs)))
        return True if seen[-1] == (want, set(jobs)) else None

    try:
        wait_for(recorded, 60, "one audit row per closed round")
    except CheckFailed:
        rows, done = seen[-1]
        raise CheckFailed(f"audit rows {dict(rows)} (want {dict(want)}), finished {done}") from None
    report.note(
        f"audit: {sum(want.values())} round rows (one per closed round), {len(jobs)} jobs finished"
    )


def check_gateway(
    compose: Compose, secrets: Mapping[str, str], scratch: Path, report: Report
) -> None:
    """A device check-in from the host, through the published port, with a host-made token."""
    base = f"http://127.0.0.1:{compose.variables['VENN_COMPOSE_GATEWAY_PORT']}"
    status, body = http(f"{base}/healthz")
    check(status == 200 and json.loads(body)["status"] == "ok", f"/healthz: {status} {body}")
    device = "dev-compose-check"
    venn = Path(sys.executable).parent / "venn"
    minted = subprocess.run(
        [str(venn), "token", "device", device],
        env={**_host_env(), "VENN_AUTH_SECRET": secrets["VENN_AUTH_SECRET"],
             "VENN_RUN_DIR": str(scratch / "host-run")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    check(minted.returncode == 0, f"venn token device: {minted.stderr}")
    token = minted.stdout.strip()
    checkin = json.dumps(
        {"device_id": device, "attrs": {"ram": 4}, "speed_ms_per_sample": 5, "bandwidth_kbps": 100}
    ).encode()
    status, body = http(f"{base}/v1/checkin", checkin)
    check(status == 401, f"a check-in without a token: {status} {body}")
    answers: list[tuple[int, str]] = []

    def answered() -> bool | None:
        answers.append(http(f"{base}/v1/checkin", checkin, token))
        return True if answers[-1][0] == 200 else None

    try:
        wait_for(answered, 30, "a check-in answered 200")
    except CheckFailed:
        raise CheckFailed(f"check-in with a device token: {answers[-1]}") from None
    report.note(f"gateway: a device check-in from the host answered 200 {answers[-1][1][:120]}")


def check_kafka(compose: Compose, secrets: Mapping[str, str], report: Report) -> None:
    """From the host: the advertised address, no entry without credentials, the ACLs."""
    port = int(compose.variables["VENN_COMPOSE_KAFKA_PORT"])
    bootstrap = f"localhost:{port}"

    def creds(principal: str, mechanism: str = security.MECHANISM) -> Credentials:
        return Credentials(principal, secrets[security.password_variable(principal)], mechanism)

    admin = creds(security.ADMIN, security.PLAIN)
    seen = asyncio.run(brokers_seen_through(bootstrap, admin))
    check(seen == [("localhost", port)], f"the broker advertises {seen} to the host")
    check(refused(bootstrap, None), "a client without credentials was let in")
    wrong = Credentials(security.ADMIN, "wrong", security.PLAIN)
    check(refused(bootstrap, wrong), "the admin with a wrong password was let in")
    # PLAIN is the admin's alone (a static user); the services have SCRAM users.
    scheduler_plain = creds("scheduler", security.PLAIN)
    check(refused(bootstrap, scheduler_plain), "a service principal signed in with PLAIN")
    for principal, topic in (("gateway", topics.ASSIGNMENTS), ("devices", topics.JOBS)):
        try:
            asyncio.run(produce(bootstrap, creds(principal), topic))
        except TopicAuthorizationFailedError:
            continue
        raise CheckFailed(f"{principal} may write {topic}")
    # The engine ran the healthcheck (compose waited for it); it signs in, so it fails with
    # a wrong password.
    kafka = compose.container("kafka")
    test = json.loads(docker("inspect", "--format", "{{json .Config.Healthcheck.Test}}", kafka))
    check(test[0] == "CMD-SHELL", f"kafka healthcheck {test}")

    def passes(*env: str) -> bool | None:
        try:
            docker("exec", *env, kafka, "sh", "-c", test[1], timeout=120)
        except EngineError:
            return None
        return True

    # As the engine runs it: until it passes (a loaded machine can fail one run).
    wait_for(passes, 120, "the kafka healthcheck passing", every=5.0)
    wrong_password = passes("-e", "VENN_KAFKA_PASSWORD=wrong")
    check(wrong_password is None, "the kafka healthcheck passes with a wrong password")
    report.note(
        f"kafka: localhost:{port} advertised to the host; refused: no credentials, a wrong "
        "password, a service with PLAIN, gateway -> assignments, devices -> jobs; the "
        "healthcheck fails with a wrong password"
    )


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def check_metrics(compose: Compose, report: Report, schedulers: int) -> None:
    """Each scheduler worker answers /metrics on its own published port, one of them
    decides and the workers' assignments are counted; Prometheus scrapes every service."""
    ports = [compose.published("scheduler", 6066, i) for i in range(1, schedulers + 1)]
    check(len(set(ports)) == schedulers, f"the scheduler workers share host ports {ports}")
    pages = [http(f"http://127.0.0.1:{port}/metrics") for port in ports]
    check(all(status == 200 for status, _ in pages), f"scheduler /metrics: {pages}")
    deciding = [metric(text, "venn_scheduler_deciding") for _, text in pages]
    assigned = sum(metric(text, "venn_scheduler_assignments_total") for _, text in pages)
    check(sorted(deciding) == [0.0] * (schedulers - 1) + [1.0], f"deciding: {deciding}")
    check(assigned > 0, "no scheduler worker counted an assignment")
    report.note(
        f"scheduler workers: {schedulers}, /metrics on 127.0.0.1:{ports}, deciding "
        f"{deciding}, {assigned:.0f} assignments"
    )
    if "prometheus" not in compose.services:
        return
    url = f"http://127.0.0.1:{compose.variables['VENN_COMPOSE_PROMETHEUS_PORT']}/api/v1/targets"
    last: list[dict[str, str]] = []

    def all_up() -> bool | None:
        status, body = http(url)
        if status != 200:
            return None
        last[:] = [
            {"job": t["labels"]["job"], "health": t["health"]}
            for t in json.loads(body)["data"]["activeTargets"]
        ]
        jobs = Counter(t["job"] for t in last)
        want = {"gateway": 1, "scheduler": schedulers, "recorder": 1}
        ok = jobs == want and all(t["health"] == "up" for t in last)
        return True if ok else None

    try:
        wait_for(all_up, 60, "Prometheus scraping every target", every=2.0)
    except CheckFailed:
        raise CheckFailed(f"Prometheus targets: {last}") from None
    report.note(f"prometheus: {len(last)} targets up ({', '.join(sorted(t['job'] for t in last))})")


def compose_command(service: str) -> list[str]:
    spec = yaml.safe_load(COMPOSE_FILE.read_text())["services"][service]
    return [str(a) for a in spec["command"]]


def leftovers() -> dict[str, list[str]]:
    label = f"label=com.docker.compose.project={PROJECT}"
    return {
        kind: docker(*command, "--filter", label, "-q").split()
        for kind, command in (
            ("containers", ("ps", "-a")),
            ("volumes", ("volume", "ls")),
            ("networks", ("network", "ls")),
        )
    }


def run_stack(scratch: Path, report: Report, schedulers: int) -> None:
    log = scratch / "images.log"
    with report.step("images (make compose-images)"):
        built = build_all(log)
        for image in built:
            how = f"built in {image.seconds:.0f} s" if image.seconds else "cached"
            report.note(f"image {image.tag}: {how}")
    with report.step(".env as docs/operations.md makes it"):
        secrets = env_file_from_docs(scratch)
    variables = {i.variable: i.tag for i in built if i.variable}
    ports: set[int] = set()
    while len(ports) < len(PORTS):
        ports.add(free_port())
    variables |= {f"VENN_COMPOSE_{n}_PORT": str(p) for n, p in zip(PORTS, ports, strict=True)}
    services = [*LONG_RUNNING, "migrate", "topics", "coordinator", "prometheus"]
    grafana = os.environ.get("VENN_GRAFANA_IMAGE", "grafana/grafana:12.1.0")
    if exists(grafana):
        services.append("grafana")
        variables["VENN_GRAFANA_IMAGE"] = grafana
    else:
        report.note(f"grafana: not started (no image {grafana} here, none can be built)")
    compose = Compose(scratch / ".env", variables, services)
    compose.run("down", "-v", "--remove-orphans")  # what an interrupted run left
    scale = f"scheduler={schedulers}"
    try:
        with report.step(f"docker-compose up -d --build --scale {scale} (demo, metrics)"):
            compose.run("up", "-d", "--build", "--scale", scale, *services, timeout=UP_TIMEOUT_S)
        with report.step("the demo workload"):
            check_demo(compose, secrets, report)
        with report.step("from the host: gateway, Kafka, metrics"):
            check_gateway(compose, secrets, scratch, report)
            check_kafka(compose, secrets, report)
            check_metrics(compose, report, schedulers)
            for service in LONG_RUNNING:
                for container in compose.containers(service):
                    state = state_of(container)
                    check(
                        state["Status"] == "running" and state["RestartCount"] == 0,
                        f"{service}: {state['Status']}, restarted {state['RestartCount']} times",
                    )
    except BaseException:
        with suppress(CheckFailed, subprocess.SubprocessError):
            print(compose.run("logs", "--no-color", "--tail", "80", timeout=120)[-30000:])
        raise
    finally:
        with suppress(CheckFailed, subprocess.SubprocessError):
            (scratch / "compose.log").write_text(compose.run("logs", "--no-color", timeout=120))
        with report.step("docker-compose down -v --rmi local"):
            compose.run("down", "-v", "--rmi", "local", "--remove-orphans", timeout=300)
    left = leftovers()
    check(not any(left.values()), f"left after down: {left}")
    report.note("down: no container, volume or network of the project left")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedulers", type=int, default=SCHEDULERS, help="scheduler workers")
    args = parser.parse_args()
    # The refusals it provokes are the point; the clients' own log lines about them are noise.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    report = Report()
    ok = False
    scratch = Path(tempfile.mkdtemp(prefix="venn-compose-check-"))
    try:
        with engine(scratch) as started:
            if started:
                report.note("dockerd: started for the check, stopped after")
            report.containers_cpu.append(containers_cpu_s())
            try:
                run_stack(scratch, report, args.schedulers)
            finally:
                report.containers_cpu.append(containers_cpu_s())
        ok = True
    except (CheckFailed, EngineError, subprocess.SubprocessError) as exc:
        print(f"\ncompose-check: {exc}", file=sys.stderr)
    finally:
        report.print(ok)
    if ok:
        shutil.rmtree(scratch)
    else:
        print(f"  logs in {scratch}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
