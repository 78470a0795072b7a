"""What the scheduler plans with of the fleet: the gateways' supply reports, the check-ins
no gateway counted (devices producing to Kafka directly), which it counts itself as the
source ``direct``, and the attribute sets of recent check-ins (the mix admission judges a
new requirement against).

Supply counts only what a gateway can vouch for (issue 34, item 9; docs/security.md):
where the deployment authenticates, a report counts only with its gateway's own token
(kind ``gateway``, naming it), which only a holder of the deployment's secret makes, so a
report another principal writes to venn.checkins counts for nothing; a report counts at
most ``max_rate`` check-ins per second of its interval, and a source stays live for at
most `MAX_INTERVAL_S` after its report whatever interval it claims. Gateways count each
device once per interval, and so does the direct count here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from venn import events as ev
from venn.auth import AuthError, Tokens
from venn.core.scheduler import Scheduler
from venn.core.supply import AttributeMix, SlotCounts

DIRECT_SOURCE = "direct"
"""The supply source of check-ins no gateway counted."""
DIRECT_REPORT_S = 1.0
MAX_INTERVAL_S = 60.0
"""The longest interval a report is taken to cover: a source's report keeps it live for
a few intervals (`venn.core.supply.SOURCE_STALE_INTERVALS`), so a claimed interval of
hours kept a forged gateway in the count until the scheduler restarted."""


class SupplyBook:
    def __init__(
        self, now: float, tokens: Tokens | None = None, max_rate: float = float("inf")
    ) -> None:
        self.tokens = tokens
        """Where the deployment authenticates: the check of a report's gateway token."""
        self.max_rate = max_rate
        """Most check-ins per second one report may count (VENN_SUPPLY_MAX_RATE)."""
        self.direct = SlotCounts(now)
        self.direct_attrs: list[Mapping[str, float]] = []
        self.direct_devices: set[str] = set()
        self.mix = AttributeMix()
        self.reports = 0
        self.unvouched = 0
        """Reports not counted: without a token of their gateway (forged, or an older
        gateway's where the deployment authenticates)."""

    def restart(self, now: float) -> None:
        """A new core: the direct counts start again (the mix is kept)."""
        self.direct = SlotCounts(now)
        self.direct_attrs = []
        self.direct_devices = set()

    def vouched(self, event: ev.SupplyReport) -> bool:
        """Whether ``event`` carries a valid token of the gateway it names (or the report's
        part: ``<gateway>.<n>``); always without authentication."""
        if self.tokens is None:
            return True
        try:
            claims = self.tokens.check(event.token, "gateway")
        except AuthError:
            return False
        name = event.gateway
        return (
            claims.kind == "admin"
            or name == claims.subject
            or (name.startswith(claims.subject + ".") and name[len(claims.subject) + 1 :].isdigit())
        )

    def report(self, core: Scheduler, event: ev.SupplyReport, now: float) -> bool:
        """A gateway's counts of the check-ins it received in its last interval; False
        when not counted (not vouched for)."""
        if not self.vouched(event):
            self.unvouched += 1
            return False
        interval = min(event.interval_s, MAX_INTERVAL_S)
        counts = np.array([c.count for c in event.counts], dtype=np.float64)
        total = float(counts.sum())
        most = self.max_rate * interval
        if total > most:  # more than one gateway can receive: scaled down to its bound
            counts *= most / total
        slots = np.array([core.slot_of(c.attrs) for c in event.counts], dtype=np.int64)
        core.observe_report(event.gateway, slots, counts, interval, now)
        self.reports += 1
        for c, n in zip(event.counts, counts.tolist(), strict=True):
            self.mix.observe(c.attrs, int(n))
        return True

    def count_direct(
        self,
        core: Scheduler,
        slots: np.ndarray,
        attrs: list[Mapping[str, float]],
        now: float,
        device_ids: Sequence[str],
    ) -> None:
        """Check-ins no gateway counted, each device once per report interval."""
        seen = self.direct_devices
        keep = []
        for i, device in enumerate(device_ids):
            if device not in seen:
                seen.add(device)
                keep.append(i)
        if len(keep) < len(device_ids):
            slots = slots[keep]
            attrs = [attrs[i] for i in keep]
        if len(keep):
            self.direct.add(slots)
            self.direct_attrs.extend(attrs)
        self.report_direct(core, now)

    def report_direct(self, core: Scheduler, now: float) -> None:
        """The direct check-ins counted since the last report, as the direct source's
        report, once DIRECT_REPORT_S has passed: on a later check-in or on the next status
        snapshot, so that none waits for a check-in that may not come. Their attribute sets
        join the mix in the same step: a snapshot's mix and rate describe the same
        check-ins."""
        if not self.direct_attrs or now - self.direct.since < DIRECT_REPORT_S:
            return
        found, counts, interval = self.direct.drain(now)
        core.observe_report(DIRECT_SOURCE, found, counts, interval, now)
        for attrs in self.direct_attrs:
            self.mix.observe(attrs)
        self.direct_attrs = []
        self.direct_devices = set()
