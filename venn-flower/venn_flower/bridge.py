"""How a ServerApp speaks to Venn: HTTP to the Venn Flower bridge, a small service of the
Venn deployment that runs beside the SuperLink (`python -m venn.integrations.flower.bridge`)
and turns these calls into Venn's job events. The ServerApp so needs neither Kafka nor the
Venn server package, only the standard library.

Where the bridge is: the run config key ``venn-bridge``, else ``VENN_FLOWER_BRIDGE`` in the
environment the SuperLink gives its ServerApps, else ``http://127.0.0.1:8089``. A job token
(run config ``venn-job-token`` or ``VENN_JOB_TOKEN``) goes with every call when given; the
bridge mints one from its deployment's secret otherwise.

Every call is bounded (``timeout_s``); an unreachable or failing bridge raises
`VennUnavailable`, which `VennStrategy` answers by falling back to Flower's own sampling.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BRIDGE_ENV = "VENN_FLOWER_BRIDGE"
TOKEN_ENV = "VENN_JOB_TOKEN"
BRIDGE_KEY = "venn-bridge"
TOKEN_KEY = "venn-job-token"
DEFAULT_BRIDGE = "http://127.0.0.1:8089"


class VennUnavailable(RuntimeError):
    """Venn (the bridge, or what is behind it) did not answer in time or failed."""


class VennRefused(RuntimeError):
    """Venn refused a call for good (a bad request, an unknown or refused job)."""


@dataclass(frozen=True)
class Round:
    """A round attempt's devices so far, and how long ago Venn was last heard from at
    all (any job's assignment or any device's result: None when never)."""

    devices: list[str]
    heard_s: float | None


@dataclass(frozen=True)
class Bridge:
    url: str
    token: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0

    @classmethod
    def for_run(
        cls, run_config: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Bridge:
        env = os.environ if environ is None else environ
        url = run_config.get(BRIDGE_KEY) or env.get(BRIDGE_ENV) or DEFAULT_BRIDGE
        token = run_config.get(TOKEN_KEY) or env.get(TOKEN_ENV) or None
        return cls(str(url).rstrip("/"), str(token) if token else None)

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as answer:
                payload = json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            if exc.code >= 500 or exc.code == 429:
                raise VennUnavailable(f"{method} {path}: {exc.code} {detail}") from None
            raise VennRefused(f"{method} {path}: {exc.code} {detail}") from None
        except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON
            raise VennUnavailable(f"{method} {path}: {exc}") from None
        return payload if isinstance(payload, dict) else {}

    @staticmethod
    def _job(job_id: str) -> str:
        return f"/v1/runs/{urllib.parse.quote(job_id, safe='')}"

    def register(
        self,
        job_id: str,
        requirement: Mapping[str, float],
        demand: int,
        rounds: int,
        deadline_s: float,
        workload_s: float,
    ) -> dict[str, float]:
        """Register the run's job (again after an outage: the same job, not a second one);
        the requirement as Venn reads it (aliases resolved)."""
        answer = self._call(
            "PUT",
            self._job(job_id),
            {
                "requirement": dict(requirement),
                "demand": demand,
                "rounds": rounds,
                "deadline_s": deadline_s,
                "workload_s": workload_s,
            },
        )
        got = answer.get("requirement")
        return {str(k): float(v) for k, v in got.items()} if isinstance(got, dict) else {}

    def request_round(self, job_id: str, round_index: int, demand: int) -> None:
        self._call("POST", f"{self._job(job_id)}/rounds/{round_index}", {"demand": demand})

    def assignments(self, job_id: str, round_index: int, have: int, wait_s: float) -> Round:
        """The attempt's devices, once more than ``have`` are assigned or ``wait_s`` passed."""
        query = urllib.parse.urlencode({"have": have, "wait": round(max(0.0, wait_s), 3)})
        answer = self._call(
            "GET",
            f"{self._job(job_id)}/rounds/{round_index}?{query}",
            timeout_s=wait_s + self.timeout_s,
        )
        devices = answer.get("devices")
        heard = answer.get("heard_s")
        return Round(
            [str(d) for d in devices] if isinstance(devices, list) else [],
            float(heard) if isinstance(heard, int | float) else None,
        )

    def close_round(
        self,
        job_id: str,
        round_index: int,
        outcome: str,
        results: int,
        reason: str,
        opened_at: float,
        started_at: float,
        demand: int = 1,
        assigned: int = 0,
    ) -> None:
        """Close an attempt (``demand`` and ``assigned``: what the bridge reports if it no
        longer follows the attempt, after a restart)."""
        self._call(
            "POST",
            f"{self._job(job_id)}/rounds/{round_index}/close",
            {
                "outcome": outcome,
                "results": results,
                "reason": reason[:200],
                "opened_at": opened_at,
                "started_at": started_at,
                "demand": demand,
                "assigned": assigned,
            },
        )

    def alive(self, job_id: str) -> None:
        """Keep the job alive through a long round (Venn expires a silent job)."""
        self._call("POST", f"{self._job(job_id)}/alive", {})

    def finish(self, job_id: str, rounds_completed: int) -> None:
        self._call("POST", f"{self._job(job_id)}/finish", {"rounds_completed": rounds_completed})

    def cancel(self, job_id: str, reason: str) -> None:
        self._call("POST", f"{self._job(job_id)}/cancel", {"reason": reason[:200]})
