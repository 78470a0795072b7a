"""The live dashboard (issue 15, item 3) in headless Chromium.

`venn up`'s stack (scheduler, recorder and gateway as detached processes) on the session's
Kafka and Postgres, an emulated device fleet checking in over HTTP and a coordinator
running three jobs of four rounds. Debian's Chromium, driven by Playwright, opens the URL
`venn up` prints (an operator token in its fragment) and watches the page: every job's
round count rises while it runs, every job ends `finished` with its JCT, and the supply,
plan and assignment-rate panels are filled. Screenshots are written to the test's
tmp_path and to `<basetemp>/artifacts/` (printed).

Without a chromium binary the test is skipped, unless VENN_REQUIRE_COMPOSE=1 (.ci/run sets
it, and installs Debian's chromium): then it fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Page, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout

from services.coordinator import run_coordinator
from services.devices.fleet import FleetStats, HttpDeviceFleet, synthetic_source
from tests.brokers import StackBroker
from tests.e2e.harness import venn_up
from venn.auth import Tokens
from venn.auth.local import dashboard_url
from venn.core.model import JobSpec, Requirement
from venn.sdk.clock import TraceClock
from venn.settings import Settings, stack_ports
from venn.traces.devices import DeviceProfiles, load_device_profiles

pytestmark = pytest.mark.e2e

SPEEDUP = 20.0
RATE_PER_S = 1.5  # check-ins per trace second: 30 per wall second
JOBS = 3
ROUNDS = 4
WORKLOAD_S = 15.0
"""Trace seconds of a task on an average device: rounds of a few wall seconds, so that the
page, updated every second, shows each job's round count rising."""
FINISH_TIMEOUT_S = 240.0


def chromium() -> str:
    """Debian's chromium (never a browser downloaded by `playwright install`)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = "no chromium on PATH: apt-get install chromium (.ci/run does)"
        if os.environ.get("VENN_REQUIRE_COMPOSE") == "1":
            pytest.fail(reason + "; VENN_REQUIRE_COMPOSE=1 requires it")
        pytest.skip(reason)
    return path


@dataclass
class Stack:
    settings: Settings
    url: str
    """The gateway's base URL."""
    tag: str


@pytest.fixture
def stack(stack_broker: StackBroker, pg_url: str, tmp_path: Path) -> Iterator[Stack]:
    """`venn up` on the module's broker (the session's, secured) and the session's Postgres
    (VENN_DATABASE_URL); its own scheduler app id and recorder group."""
    with venn_up(tmp_path / "run", stack_broker, VENN_DATABASE_URL=pg_url) as (info, settings):
        assert settings.auth_enabled
        port = stack_ports(info.run_dir)["gateway"]
        yield Stack(settings, f"http://127.0.0.1:{port}", uuid.uuid4().hex[:8])


def workload(tag: str) -> tuple[list[JobSpec], DeviceProfiles]:
    """Jobs needing an attribute only this test's devices report (other tests' jobs on the
    session's topics cannot take these devices), in two groups: devices with 2 serve all
    jobs, devices with 1 only the first two."""
    attr = f"dash_{tag}"
    jobs = [
        JobSpec(
            job_id=f"dash-{tag}-{i}",
            requirement=Requirement.of({attr: 2.0 if i == JOBS - 1 else 1.0}),
            demand=3,
            rounds=ROUNDS,
            deadline=90.0,
            arrival=10.0 + 5.0 * i,
            workload_s=WORKLOAD_S,
        )
        for i in range(JOBS)
    ]
    base = load_device_profiles()
    attrs = tuple({**a, attr: float(1 + i % 2)} for i, a in enumerate(base.attrs))
    return jobs, DeviceProfiles(attrs, base.tiers_met, base.names)


async def run_workload(stack: Stack, jobs: list[JobSpec], profiles: DeviceProfiles) -> Any:
    """The fleet (over HTTP, through the gateway) and the jobs' coordinator, until every job
    ends; returns the coordinator's outcomes."""
    clock = TraceClock(speedup=SPEEDUP)
    stop_fleet, stop_jobs = asyncio.Event(), asyncio.Event()
    fleet = HttpDeviceFleet(
        stack.url,
        stack.settings.for_role("devices"),
        synthetic_source(RATE_PER_S, None, seed=5),
        clock,
        profiles=profiles,
        workload_s=WORKLOAD_S,
        stats=FleetStats(),
    )
    fleet_task = asyncio.create_task(fleet.run(stop_fleet))
    timer = asyncio.get_running_loop().call_later(FINISH_TIMEOUT_S, stop_jobs.set)
    try:
        return await run_coordinator(
            stack.settings.for_role("coordinator"), jobs, SPEEDUP, stop_jobs, clock=clock
        )
    finally:
        timer.cancel()
        stop_fleet.set()
        await fleet_task


ROWS_JS = """ids => ids.map(id => {
  const row = document.querySelector(`#jobs tbody tr[data-job-id="${id}"]`);
  if (!row) return null;
  return {state: row.dataset.state, done: Number(row.dataset.roundsDone),
          round: row.querySelector("td.round").textContent,
          jct: row.querySelector("td.jct").textContent};
})"""
TILES_JS = """() => ({
  assign: Number(document.getElementById("t-assign").textContent),
  checkins: Number(document.getElementById("t-checkins").textContent),
  supply: document.querySelectorAll("#supply tbody tr").length,
  demand: [...document.querySelectorAll("#demand tbody tr")].map(r => r.textContent),
  plan: document.getElementById("plan-meta").textContent,
  snapshots: Number(document.body.dataset.snapshots || 0),
})"""


async def cli(stack: Stack, *args: str) -> tuple[int, str, str]:
    """`venn ARGS` as an operator on this machine runs it: it finds the gateway and mints
    its operator token from `venn up`'s run directory (no URL, no token given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENN_")}
    env["VENN_RUN_DIR"] = str(stack.settings.run_dir)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "venn.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def cli_while_running(
    stack: Stack, ids: list[str], work: asyncio.Task[Any]
) -> dict[str, Any]:
    """The CLI's view of the live stack while the jobs run: `venn plan`, `venn devices` and
    `venn job list` read what the running scheduler publishes, not a hand-made snapshot.
    Each command is repeated until it has shown that, or the workload ends."""
    seen: dict[str, Any] = {}
    while not work.done() and len(seen) < 3:
        if "plan" not in seen:
            code, out, err = await cli(stack, "plan", "--json")
            assert code == 0, err
            plan = json.loads(out)
            # This test's job groups (its own attribute), as the live scheduler planned them.
            attr = f"dash_{stack.tag}"
            mine = [g for g in plan["job_groups"] if attr in g["requirement"]]
            if plan["available"] and len(mine) == 2:
                seen["plan"] = mine
        if "devices" not in seen:
            code, out, err = await cli(stack, "devices", "--json")
            assert code == 0, err
            if json.loads(out)["checkin_rate_per_s"] > 0:
                seen["devices"] = json.loads(out)
        if "list" not in seen:
            code, out, err = await cli(stack, "job", "list", "--json")
            assert code == 0, err
            states = {j["job_id"]: j["state"] for j in json.loads(out) if j["job_id"] in ids}
            if "running" in states.values():
                seen["list"] = states
        await asyncio.sleep(0.5)
    return seen


async def screenshot(page: Page, name: str, tmp_path: Path, artifacts: Path) -> Path:
    path = tmp_path / name
    await page.screenshot(path=str(path), full_page=True)
    shutil.copy(path, artifacts / name)
    return artifacts / name


async def test_the_page_shows_jobs_progressing_and_finishing(
    stack: Stack,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    executable = chromium()
    artifacts = tmp_path_factory.getbasetemp() / "artifacts"
    artifacts.mkdir(exist_ok=True)
    jobs, profiles = workload(stack.tag)
    ids = [j.job_id for j in jobs]

    # The data stream is the operator's alone; the page itself holds nothing.
    tokens = Tokens(stack.settings.auth_secret)
    job_token = tokens.issue("job", "owner", jobs=ids, ttl_s=60)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        async with http.get(stack.url + "/") as r:
            assert r.status == 200 and "text/html" in r.content_type
            assert "script-src 'self'" in r.headers["Content-Security-Policy"]
        events = stack.url + "/v1/events/dashboard"
        async with http.get(events) as r:
            assert r.status == 401
        async with http.get(events, headers={"Authorization": f"Bearer {job_token}"}) as r:
            assert r.status == 403

    port = int(stack.url.rsplit(":", 1)[1])
    seen: dict[str, list[int]] = {job_id: [] for job_id in ids}
    most: dict[str, float] = {"assign": 0.0, "checkins": 0.0, "supply": 0.0}
    attr = f"dash_{stack.tag}"
    groups_shown: set[str] = set()
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=executable,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1100})
            errors: list[str] = []
            console: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: console.append(f"{msg.type}: {msg.text}"))
            # The URL `venn up` prints: the token rides in the fragment, then leaves it.
            await page.goto(dashboard_url(stack.settings, port))
            try:
                await page.wait_for_selector("#connection[data-state=live]", timeout=30_000)
            except PlaywrightTimeout:
                state = await page.evaluate("document.getElementById('connection').outerHTML")
                raise AssertionError(f"never live: {state}; {errors}; {console}") from None
            assert "token" not in page.url
            while (await page.evaluate(TILES_JS))["snapshots"] < 2:  # (wait_for_function
                await asyncio.sleep(0.2)  # would eval a string: the page's CSP forbids it)

            started = time.monotonic()
            work = asyncio.create_task(run_workload(stack, jobs, profiles))
            live_cli = asyncio.create_task(cli_while_running(stack, ids, work))
            running_shot: Path | None = None
            rows: list[Any] = []
            while time.monotonic() - started < FINISH_TIMEOUT_S + 30:
                rows = await page.evaluate(ROWS_JS, ids)
                tiles = await page.evaluate(TILES_JS)
                for key in most:
                    most[key] = max(most[key], tiles[key] or 0.0)
                groups_shown |= {text for text in tiles["demand"] if attr in text}
                for job_id, row in zip(ids, rows, strict=True):
                    if row is not None and (not seen[job_id] or seen[job_id][-1] != row["done"]):
                        seen[job_id].append(row["done"])
                if running_shot is None and any(r and r["state"] == "running" for r in rows):
                    running_shot = await screenshot(
                        page, "dashboard-running.png", tmp_path, artifacts
                    )
                if all(r is not None and r["state"] == "finished" for r in rows):
                    break
                if work.done() and work.exception() is not None:
                    raise AssertionError("the workload failed") from work.exception()
                await asyncio.sleep(0.3)
            wall_s = time.monotonic() - started
            await asyncio.sleep(1.5)  # one more snapshot: the charts and tiles settle
            finished_shot = await screenshot(page, "dashboard-finished.png", tmp_path, artifacts)
            with capsys.disabled():
                print(f"\ndashboard screenshots: {running_shot} {finished_shot}")
            outcomes = await asyncio.wait_for(work, 60)
            tiles = await page.evaluate(TILES_JS)
            live = await asyncio.wait_for(live_cli, 60)
        finally:
            await browser.close()

    assert all(outcomes[j].finished for j in ids), {j: outcomes[j].jct_s for j in ids}
    assert [r["state"] for r in rows] == ["finished"] * JOBS, (rows, wall_s)
    assert [r["round"] for r in rows] == [f"{ROUNDS} of {ROUNDS}"] * JOBS
    for job_id, row in zip(ids, rows, strict=True):
        assert float(row["jct"]) == pytest.approx(outcomes[job_id].jct_s, abs=0.05)
    # Progress was shown as it happened: each job's round count only rose, through rounds
    # in between, to all of them.
    for job_id, counts in seen.items():
        assert counts == sorted(counts) and counts[-1] == ROUNDS, (job_id, counts)
        assert any(0 < c < ROUNDS for c in counts), (job_id, counts)
    assert sum(len(c) for c in seen.values()) >= 2 * JOBS
    # The other panels were live too.
    assert most["assign"] > 0 and most["checkins"] > 0
    assert most["supply"] >= 1 and tiles["plan"].startswith("policy venn")
    assert any("≥ 2" in text for text in groups_shown), groups_shown  # the job groups
    assert any("≥ 1" in text for text in groups_shown), groups_shown
    assert errors == []
    assert running_shot is not None and running_shot.stat().st_size > 0
    assert finished_shot.stat().st_size > 0

    # The CLI saw the same live stack: the scheduler's plan with these jobs' two groups,
    # devices checking in, the jobs running; and, now, each one finished with its JCT.
    assert set(live) == {"plan", "devices", "list"}, live
    assert sorted(g["requirement"][attr] for g in live["plan"]) == [1.0, 2.0]
    for job_id in ids:
        code, out, err = await cli(stack, "job", "status", job_id, "--watch", "--json")
        assert code == 0, err
        job = json.loads(out)
        assert (job["state"], job["rounds_done"]) == ("finished", ROUNDS), job
        assert job["jct_s"] == pytest.approx(outcomes[job_id].jct_s, abs=0.05)
    code, out, _ = await cli(stack, "job", "status", ids[0])
    assert code == 0 and "finished" in out and ids[0] in out
