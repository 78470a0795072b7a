"""A SuperNode's presence in Venn: its launcher checks in to the gateway with the node's
attributes, under the node's device token, and reports each Venn task's end.

The node's ClientApps (through `venn_mod`) tell the agent when a task starts and ends, over
a small HTTP desk on loopback (`desk`). Between the two the node is busy: the agent does
not check in, so Venn cannot hand the node to another run, even when the task outlives its
round (the round closed at its target, or timed out). When the task ends the agent posts
the result (the node is free at once, not at the round's close) and checks in right away.
After an assignment the agent does not check in for ``hold_s`` unless a task runs and ends
first: Flower delivers the round's message seconds later (the SuperNode looks for one every
3 s, and a new `flwr-clientapp` process starts), and a check-in in between gave the node to
another round, so its task was refused as stale (a replacement attempt of the same run took
the node it was waiting for: CI of dca6ff8).
A task of a Venn round the node no longer holds (its round closed before Flower delivered
the message, and Venn gave the node to another round since) is refused at once, so it does
not delay the work the node holds now.

Log lines say what changed (assigned, gateway unreachable, gateway back), never one line
per failed check-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from venn_flower.profile import NodeProfile
from venn_flower.protocol import RoundTag

log = logging.getLogger("venn_flower.agent")

RESULT_ATTEMPTS = 3


@dataclass
class AgentStats:
    checkins: int = 0
    assigned: int = 0
    refused: int = 0
    errors: int = 0
    tasks: int = 0
    stale_tasks: int = 0
    results_sent: int = 0
    results_lost: int = 0
    assignments: list[tuple[float, str, int]] = field(default_factory=list)
    """(time, job id, round index) of each assignment."""


class GatewayRefused(RuntimeError):
    """The gateway refused a request for good (a bad token or body)."""


class NodeAgent:
    """Check-ins and task reports of one node. ``interval_s``: the longest pause between
    check-ins while the node gets no work (a shorter retry_after from the gateway wins);
    ``hold_s``: how long an assignment holds the node for its task to arrive."""

    def __init__(
        self,
        profile: NodeProfile,
        gateway: str,
        token: str | None,
        *,
        device_id: str | None = None,
        interval_s: float = 1.0,
        hold_s: float = 20.0,
    ) -> None:
        self.profile = profile
        self.gateway = gateway.rstrip("/")
        self.token = token
        self.device_id = device_id or profile.device_id
        self.interval_s = interval_s
        self.hold_s = hold_s
        self.stats = AgentStats()
        self.latest: RoundTag | None = None
        """The last assignment the gateway answered (the round the node holds or held)."""
        self.busy = 0
        self._free = asyncio.Event()
        self._free.set()
        self._wake = asyncio.Event()
        self._reachable: bool | None = None
        self._reports: set[asyncio.Task[None]] = set()
        self._http: aiohttp.ClientSession | None = None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _reach(self, ok: bool, why: str = "") -> None:
        """One log line when the gateway becomes unreachable, one when it is back."""
        if ok and self._reachable is False:
            log.info("%s: Venn gateway reachable again", self.device_id)
        elif not ok and self._reachable is not False:
            log.warning(
                "%s: Venn gateway %s unreachable (%s); checking in again every %.0f s",
                self.device_id,
                self.gateway,
                why,
                self.interval_s,
            )
        self._reachable = ok

    # -- check-ins ---------------------------------------------------------------------
    async def checkin(self, http: aiohttp.ClientSession) -> float:
        """One check-in; returns how long to wait before the next."""
        self.stats.checkins += 1
        try:
            async with http.post(
                f"{self.gateway}/v1/checkin",
                json=self.profile.checkin_body(self.device_id),
                headers=self._headers(),
            ) as response:
                payload: dict[str, Any] = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self.stats.errors += 1
            self._reach(False, repr(exc))
            return self.interval_s
        self._reach(True)
        if status in (401, 403, 422):
            # A bad token or profile does not heal by retrying fast.
            self.stats.refused += 1
            log.error("%s: check-in refused (%d): %s", self.device_id, status, payload)
            return max(self.interval_s, 10.0)
        if status == 200 and payload.get("assigned"):
            self.stats.assigned += 1
            assigned = RoundTag(str(payload["job_id"]), int(payload["round_index"]))
            self.latest = assigned
            self.stats.assignments.append((time.time(), assigned.job_id, assigned.round_index))
            log.info(
                "%s: assigned to %s round %d",
                self.device_id,
                assigned.job_id,
                assigned.round_index,
            )
            return self.hold_s
        retry = payload.get("retry_after")
        if status == 429 and isinstance(retry, int | float):
            return float(retry)
        return min(float(retry), self.interval_s) if isinstance(retry, int | float) else 1.0

    async def run(self, stop: asyncio.Event) -> None:
        """Check in until ``stop`` is set, never while a task runs."""
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            self._http = http
            stopped = asyncio.ensure_future(stop.wait())
            try:
                while not stop.is_set():
                    if not self._free.is_set():
                        free = asyncio.ensure_future(self._free.wait())
                        await asyncio.wait({free, stopped}, return_when="FIRST_COMPLETED")
                        free.cancel()
                        continue
                    pause = await self.checkin(http)
                    self._wake.clear()
                    woken = asyncio.ensure_future(self._wake.wait())
                    await asyncio.wait(
                        {woken, stopped}, timeout=pause, return_when="FIRST_COMPLETED"
                    )
                    woken.cancel()
                if self._reports:
                    await asyncio.wait(self._reports, timeout=15)
            finally:
                stopped.cancel()
                self._http = None

    # -- tasks (from venn_mod, through the desk) ----------------------------------------
    def task_started(self, round_tag: RoundTag | None) -> bool:
        """A ClientApp task begins; False: refuse it (a Venn round the node no longer
        holds). Untagged tasks (not Venn's: a run that fell back to Flower's sampling) keep
        the node busy too."""
        if round_tag is not None and self.latest is not None and self.latest != round_tag:
            self.stats.stale_tasks += 1
            log.info(
                "%s: refusing a task of %s round %d: the node holds %s round %d since",
                self.device_id,
                round_tag.job_id,
                round_tag.round_index,
                self.latest.job_id,
                self.latest.round_index,
            )
            return False
        self.stats.tasks += 1
        self.busy += 1
        self._free.clear()
        if round_tag is not None:
            log.info(
                "%s: task of %s round %d started",
                self.device_id,
                round_tag.job_id,
                round_tag.round_index,
            )
        return True

    def task_ended(
        self, round_tag: RoundTag | None, ok: bool, response_time_s: float, reason: str
    ) -> None:
        """A task ended: report it (a Venn task) and check in again at once."""
        self.busy = max(0, self.busy - 1)
        if round_tag is not None:
            report = asyncio.ensure_future(self._report(round_tag, ok, response_time_s, reason))
            self._reports.add(report)
            report.add_done_callback(self._reports.discard)
        elif not self.busy:
            self._free.set()
            self._wake.set()

    async def _report(
        self, round_tag: RoundTag, ok: bool, response_time_s: float, reason: str
    ) -> None:
        try:
            sent = await self.post_result(round_tag, ok, response_time_s, reason)
        except Exception:  # never lose the node to a report
            log.exception("%s: reporting a result failed", self.device_id)
            sent = False
        if sent:
            self.stats.results_sent += 1
        else:
            # Venn frees the node at its round's close anyway.
            self.stats.results_lost += 1
        if not self.busy:
            self._free.set()
            self._wake.set()

    async def post_result(
        self, round_tag: RoundTag, ok: bool, response_time_s: float, reason: str
    ) -> bool:
        """`POST /v1/results`; True once the gateway took it."""
        body = {
            "device_id": self.device_id,
            "job_id": round_tag.job_id,
            "round_index": round_tag.round_index,
            "ok": ok,
            "response_time_s": max(0.0, response_time_s),
            "reason": reason[:200] or None,
        }
        own = self._http is None
        http = self._http or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        try:
            for attempt in range(RESULT_ATTEMPTS):
                pause = 1.0
                try:
                    async with http.post(
                        f"{self.gateway}/v1/results", json=body, headers=self._headers()
                    ) as response:
                        if 200 <= response.status < 300:
                            return True
                        text = await response.text()
                        if response.status != 429:
                            log.warning(
                                "%s: Venn refused the result (%d): %s",
                                self.device_id,
                                response.status,
                                text[:200],
                            )
                            return False
                        pause = float(response.headers.get("Retry-After") or 1)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self._reach(False, repr(exc))
                if attempt + 1 < RESULT_ATTEMPTS:
                    await asyncio.sleep(min(pause, 5.0))
            return False
        finally:
            if own:
                await http.close()


async def enroll(gateway: str, enroll_token: str, device_id: str) -> str:
    """A device token for ``device_id`` from the gateway (`POST /v1/devices`)."""
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.post(
            f"{gateway.rstrip('/')}/v1/devices",
            json={"device_id": device_id},
            headers={"Authorization": f"Bearer {enroll_token}"},
        ) as response,
    ):
        payload = await response.json(content_type=None)
        if response.status != 201:
            raise GatewayRefused(f"enrolment of {device_id} refused ({response.status}): {payload}")
        return str(payload["token"])


async def enroll_until_done(
    gateway: str, enroll_token: str, device_id: str, stop: asyncio.Event
) -> str | None:
    """`enroll`, retried while the gateway is unreachable or busy (None: stopped)."""
    warned = False
    while not stop.is_set():
        try:
            return await enroll(gateway, enroll_token, device_id)
        except GatewayRefused as exc:
            if "(429)" not in str(exc):
                raise
            why = str(exc)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            why = repr(exc)
        if not warned:
            log.warning("%s: enrolment not done yet (%s); retrying", device_id, why)
            warned = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 2.0)
    return None
