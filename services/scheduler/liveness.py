"""Who is still there, by this worker's clock: jobs whose coordinator fell silent, and
devices holding an assignment past their round's deadline. Neither is in the tables: a
rebuild counts silence from itself, and a device's hold from when it is next seen."""

from __future__ import annotations

from collections.abc import Iterable

from venn.core.scheduler import Scheduler


class Liveness:
    def __init__(self, job_timeout_s: float) -> None:
        self.job_timeout_s = job_timeout_s
        self.last_seen: dict[str, float] = {}
        """Live job -> when its coordinator last said anything."""
        self.held_since: dict[str, float] = {}
        """Device -> when it took the assignment it holds."""
        self.overdue_released = 0

    def clear(self, live_jobs: Iterable[str], now: float) -> None:
        """A rebuild: silence of every live job is counted from ``now``."""
        self.last_seen = dict.fromkeys(live_jobs, now)
        self.held_since.clear()

    def heard_of(self, job_id: str, now: float) -> None:
        self.last_seen[job_id] = now

    def gone(self, job_id: str) -> None:
        self.last_seen.pop(job_id, None)

    def silent(self, core: Scheduler, now: float) -> list[tuple[str, float]]:
        """Live jobs silent past the timeout: (job id, last seen)."""
        timeout = self.job_timeout_s
        if timeout <= 0:
            return []
        return [
            (job_id, seen)
            for job_id, seen in self.last_seen.items()
            if now - seen > timeout and core.round_view(job_id) is not None
        ]

    def took(self, devices: Iterable[str], now: float) -> None:
        self.held_since.update(dict.fromkeys(devices, now))

    def released(self, device_id: str) -> None:
        self.held_since.pop(device_id, None)

    def round_ended(self, core: Scheduler, devices: Iterable[str]) -> None:
        """Forget the hold times of a round's devices that no longer hold anything (kept,
        every device ever assigned would stay in the map)."""
        for device in devices:
            if core.holder(device) is None:
                self.held_since.pop(device, None)

    def release_if_overdue(self, core: Scheduler, device_id: str, now: float) -> None:
        """A device still holding an assignment past its job's round deadline took the
        task and vanished (or gave up): it no longer holds it, and may be assigned again."""
        holder = core.holder(device_id)
        if holder is None:
            return
        view = core.round_view(holder[0])
        since = self.held_since.setdefault(device_id, now)
        if view is None or now - since > view.deadline:
            core.release_device(device_id)
            self.held_since.pop(device_id, None)
            self.overdue_released += 1
