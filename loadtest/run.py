"""Run the Locust load test headless, for a bounded time, against an embedded stack.

    .venv/bin/python loadtest/run.py --duration 60 --users 50 --kafka-users 1 --processes 2

Starts broker + scheduler + gateway + coordinators (`loadtest.stack`), secured as under
`venn up` (API tokens; on Apache Kafka a SASL/SCRAM principal per service) unless
`--insecure`, runs `locust -f loadtest/locustfile.py --headless` with both user types (the
devices enrol with an enrol token given in VENN_LOADTEST_ENROLL_TOKEN, the Kafka user signs
in as the `devices` principal), and writes Locust's CSV (`<out>/locust_stats.csv`,
`..._failures.csv`, `..._stats_history.csv`), its HTML report (`<out>/report.html`) and the
gateway's counters (`<out>/gateway.json`) under `loadtest/out/` (gitignored). Prints the
table, then check-ins per second in all, per Locust process and per user. Exit status 0
iff no request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import dataclasses
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest.stack import LoadStack, StackConfig  # noqa: E402
from venn.settings import LoadtestSettings, Settings  # noqa: E402

LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"
DEFAULT_OUT = ROOT / "loadtest" / "out"


@dataclass(frozen=True)
class LoadTestConfig:
    duration_s: float = 60.0
    users: int = 50
    """HTTP device users (each stands for many devices)."""
    kafka_users: int = 1
    spawn_rate: float = 50.0
    peak_rate: float = 4.0
    """Check-ins per second of one HTTP user at the diurnal peak."""
    kafka_peak_rate: float = 200.0
    day_s: float = 120.0
    """Wall seconds of one compressed day."""
    population: int = 5_000_000
    processes: int = 1
    """Locust worker processes (`--processes`); 1 = a single process."""
    out: Path = DEFAULT_OUT
    prefix: str = "locust"
    secure: bool = True
    """Run against a stack secured as under `venn up` (see `loadtest.stack.StackConfig`)."""


@dataclass(frozen=True)
class Row:
    type: str
    name: str
    requests: int
    failures: int
    median_ms: float
    p95_ms: float
    p99_ms: float
    rps: float


CHECKIN_ROWS = "/v1/checkin ["
"""Locust names the HTTP check-in rows by answer: `/v1/checkin [assigned]`, ..."""
KAFKA_CHECKIN_ROW = "produce venn.checkins"


@dataclass(frozen=True)
class Rates:
    """Check-ins per second over the run (Locust's own request rates)."""

    http: float
    kafka: float
    processes: int
    http_users: int
    kafka_users: int

    @property
    def total(self) -> float:
        return self.http + self.kafka

    @property
    def per_process(self) -> float:
        """Check-ins per second one Locust process sent (the load generator's capacity)."""
        return self.total / self.processes

    @property
    def per_http_user(self) -> float:
        return self.http / self.http_users if self.http_users else 0.0

    @property
    def per_kafka_user(self) -> float:
        return self.kafka / self.kafka_users if self.kafka_users else 0.0

    def summary(self) -> str:
        return (
            f"check-ins/s: {self.total:.1f} ({self.http:.1f} over HTTP, {self.kafka:.1f} to "
            f"Kafka); per Locust process {self.per_process:.1f} ({self.processes} "
            f"process{'es' if self.processes > 1 else ''}); per HTTP user "
            f"{self.per_http_user:.2f} ({self.http_users}), per Kafka user "
            f"{self.per_kafka_user:.1f} ({self.kafka_users})"
        )


@dataclass(frozen=True)
class LoadTestResult:
    rows: list[Row]
    gateway: dict[str, object]
    stats_csv: Path
    html: Path
    locust_exit: int
    config: LoadTestConfig = LoadTestConfig()

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)

    @property
    def total(self) -> Row:
        total = self.row("Aggregated")
        assert total is not None
        return total

    @property
    def rates(self) -> Rates:
        kafka = self.row(KAFKA_CHECKIN_ROW)
        return Rates(
            http=sum(r.rps for r in self.rows if r.name.startswith(CHECKIN_ROWS)),
            kafka=kafka.rps if kafka is not None else 0.0,
            processes=max(1, self.config.processes),
            http_users=self.config.users,
            kafka_users=self.config.kafka_users,
        )


def read_stats(path: Path) -> list[Row]:
    def num(value: str) -> float:
        return float(value) if value not in ("", "N/A") else 0.0

    with path.open(newline="") as fh:
        return [
            Row(
                type=r["Type"],
                name=r["Name"],
                requests=int(r["Request Count"]),
                failures=int(r["Failure Count"]),
                median_ms=num(r["Median Response Time"]),
                p95_ms=num(r["95%"]),
                p99_ms=num(r["99%"]),
                rps=num(r["Requests/s"]),
            )
            for r in csv.DictReader(fh)
        ]


def locust_settings(cfg: LoadTestConfig, stack: Settings, enroll_token: str) -> Settings:
    """What the Locust processes run with: the stack's broker as its `devices` principal,
    the gateway's wait bound, the load shape, and an enrol token, not the auth secret."""
    client = stack.for_role("devices")
    return dataclasses.replace(
        client,
        run_dir=str(cfg.out),  # no stack record there: everything comes from here
        auth_secret="",
        loadtest=LoadtestSettings(
            enroll_token=enroll_token,
            population=cfg.population,
            day_s=cfg.day_s,
            peak_rate=cfg.peak_rate,
            kafka_peak_rate=cfg.kafka_peak_rate,
            kafka_users=cfg.kafka_users,
        ),
    )


async def run_locust(cfg: LoadTestConfig, host: str, client: Settings, log_path: Path) -> int:
    cfg.out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "locust",
        "-f", str(LOCUSTFILE),
        "--headless",
        "--host", host,
        "-u", str(cfg.users + cfg.kafka_users),
        "-r", str(cfg.spawn_rate),
        "-t", f"{max(round(cfg.duration_s), 1)}s",
        "--stop-timeout", "5",
        "--csv", str(cfg.out / cfg.prefix),
        "--html", str(cfg.out / "report.html"),
        "--only-summary",
        "--exit-code-on-error", "1",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    if cfg.processes > 1:
        command += ["--processes", str(cfg.processes), "--master-bind-host", "127.0.0.1"]
    env = {**os.environ, **client.as_env(), "PYTHONPATH": str(ROOT)}
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *command, cwd=ROOT, env=env, stdout=log, stderr=asyncio.subprocess.STDOUT
        )
        try:
            return await asyncio.wait_for(proc.wait(), cfg.duration_s + 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise


async def run_loadtest(cfg: LoadTestConfig, stack: StackConfig | None = None) -> LoadTestResult:
    """Start a stack, run Locust against it for `cfg.duration_s`, stop everything."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    stack_cfg = stack or StackConfig(
        run_dir=Path(tempfile.mkdtemp(prefix="venn-loadtest-")), secure=cfg.secure
    )
    async with LoadStack(stack_cfg) as s:
        assert s.settings is not None
        client = locust_settings(cfg, s.settings, s.enroll_token())
        code = await run_locust(cfg, s.url, client, cfg.out / f"{cfg.prefix}.log")
        gateway = s.gateway_health()
    (cfg.out / "gateway.json").write_text(json.dumps(gateway, indent=1))
    stats_csv = cfg.out / f"{cfg.prefix}_stats.csv"
    html = cfg.out / "report.html"
    return LoadTestResult(read_stats(stats_csv), gateway, stats_csv, html, code, cfg)


def format_rows(rows: list[Row]) -> str:
    head = f"{'type':6} {'name':38} {'requests':>9} {'fail':>5} {'p50':>6} {'p95':>6} {'p99':>6} {'req/s':>8}"  # noqa: E501
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.type:6} {r.name[:38]:38} {r.requests:>9} {r.failures:>5} {r.median_ms:>6.0f} "
            f"{r.p95_ms:>6.0f} {r.p99_ms:>6.0f} {r.rps:>8.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    d = LoadTestConfig()
    p = argparse.ArgumentParser(prog="loadtest/run.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--duration", type=float, default=d.duration_s, help="seconds of load")
    p.add_argument("--users", type=int, default=d.users, help="HTTP device users")
    p.add_argument("--kafka-users", type=int, default=d.kafka_users)
    p.add_argument("--spawn-rate", type=float, default=d.spawn_rate)
    p.add_argument("--peak-rate", type=float, default=d.peak_rate, help="check-ins/s per user")
    p.add_argument("--kafka-peak-rate", type=float, default=d.kafka_peak_rate)
    p.add_argument("--day", type=float, default=d.day_s, help="wall seconds per emulated day")
    p.add_argument("--population", type=int, default=d.population)
    p.add_argument("--processes", type=int, default=d.processes, help="Locust processes")
    p.add_argument("--gateway-workers", type=int, default=1)
    p.add_argument("--demand", type=int, default=50, help="devices per round of each job")
    p.add_argument("--wait", type=float, default=2.0, help="gateway wait bound (s)")
    p.add_argument("--insecure", action="store_true",
                   help="a stack without API tokens or Kafka principals")  # fmt: skip
    p.add_argument("--out", type=Path, default=d.out)
    args = p.parse_args(argv)
    cfg = LoadTestConfig(
        duration_s=args.duration,
        users=args.users,
        kafka_users=args.kafka_users,
        spawn_rate=args.spawn_rate,
        peak_rate=args.peak_rate,
        kafka_peak_rate=args.kafka_peak_rate,
        day_s=args.day,
        population=args.population,
        processes=args.processes,
        out=args.out,
        secure=not args.insecure,
    )
    stack = StackConfig(
        run_dir=args.out / "run",
        gateway_workers=args.gateway_workers,
        demand=args.demand,
        wait_s=args.wait,
        secure=cfg.secure,
    )
    started = time.monotonic()
    result = asyncio.run(run_loadtest(cfg, stack))
    print(format_rows(result.rows))
    print(result.rates.summary())
    print(f"gateway: {json.dumps(result.gateway.get('stats'))}")
    print(f"report: {result.html}  csv: {result.stats_csv}  ({time.monotonic() - started:.0f} s)")
    return 0 if result.total.failures == 0 and result.locust_exit == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
