"""Supply counts only what a gateway can vouch for (issue 34, items 8 and 9): each device
once per report interval, a report only with its gateway's own token, at most a
gateway's rate, and a source live for a bounded time whatever interval it claims."""

from __future__ import annotations

import pytest

from services.gateway.forwarding import SupplyCounter
from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from services.scheduler.supply import MAX_INTERVAL_S, SupplyBook
from venn import events as ev
from venn.auth import Tokens
from venn.core import make_scheduler
from venn.core.model import Requirement
from venn.core.scheduler import Scheduler
from venn.core.supply import SOURCE_STALE_INTERVALS, ReportedSupply
from venn.settings import SchedulerSettings

NOW = 1000.0
TOKENS = Tokens("k" * 40)
NEEDS_RAM_4 = Requirement.of(ram=4.0)


def sources(core: Scheduler) -> int:
    assert isinstance(core.supply, ReportedSupply)
    return core.supply.sources()


def eligible(book: SupplyBook, requirement: Requirement) -> int:
    """What admission judges a requirement on: the check-ins of the mix that meet it."""
    return sum(n for attrs, n in book.mix.counts() if requirement.admits(attrs))


def test_one_device_checking_in_in_a_loop_counts_once_per_interval() -> None:
    """Issue 34, item 8: one device token checked in 1,500 times in 0.4 s and filled the
    scheduler's supply window (1,000 check-ins) with its own attribute set; a normal job was
    then refused ``no_eligible_supply`` ("0 of 1000"). A gateway counts a device once per
    report interval, so the fleet's check-ins stay in the window."""
    counter = SupplyCounter("gw-1", NOW)
    core = make_scheduler("fifo", supply_reports=True)
    book = SupplyBook(NOW)
    for i in range(1000):
        counter.add({"ram": 8.0}, f"d{i}")
    for report in counter.reports(NOW + 1):
        book.report(core, report, NOW + 1)
    for _ in range(1500):  # 0.4 s of one device's token
        counter.add({"ram": 1.0}, "flooder")
    (flood,) = counter.reports(NOW + 1.4)
    assert [c.count for c in flood.counts] == [1]
    book.report(core, flood, NOW + 1.4)
    assert eligible(book, NEEDS_RAM_4) == 1000
    for _ in range(3):  # and again in the next interval: once more, no more
        counter.add({"ram": 1.0}, "flooder")
    assert [c.count for r in counter.reports(NOW + 2.4) for c in r.counts] == [1]


def report(gateway: str, count: int, interval: float = 1.0, **fields: object) -> ev.SupplyReport:
    return ev.SupplyReport(
        event_id=f"{gateway}:{count}:{interval}",
        time=NOW,
        gateway=gateway,
        interval_s=interval,
        counts=[ev.SupplyCount(attrs={"ram": 1.0}, count=count)],
        **fields,  # type: ignore[arg-type]
    )


def gateway_token(gateway: str) -> str:
    return TOKENS.issue("gateway", gateway, ttl_s=300)


def test_a_report_counts_only_with_its_gateways_own_token() -> None:
    """Issue 34, item 9: whoever may write venn.checkins (the ``devices`` and ``gateway``
    principals) could post a SupplyReport: one of 100,000 check-ins made admission refuse
    every job, and 1,000 invented gateways (the live-gateway count the gateways share their
    forward quota by) slowed a round of 100 from filling in 0.3 s to 77/100 after 30 s,
    until the scheduler restarted. A report counts only with a token of kind ``gateway``
    naming it, which only a holder of the deployment's secret makes."""
    s = SchedulerState(SchedulerSettings(policy="fifo"), MemoryStore(), now=NOW, tokens=TOKENS)
    s.ensure_loaded(NOW)
    s.on_supply_report(report("gw-1", 900, token=gateway_token("gw-1")), NOW)
    s.on_supply_report(report("gw-1.1", 100, token=gateway_token("gw-1")), NOW)  # its part
    assert sources(s.core) == 2 and s.core.supply.rate_per_s() == 1000.0

    forged = [
        report("gw-x", 100_000),  # no token: the devices principal's record
        report("gw-y", 100_000, token=gateway_token("gw-1")),  # another gateway's token
        report("gw-1", 100_000, token=TOKENS.issue("device", "gw-1", ttl_s=60)),
        report("gw-1", 100_000, token=Tokens("o" * 40).issue("gateway", "gw-1", ttl_s=60)),
        report("gw-1x", 100_000, token=gateway_token("gw-1")),
    ]
    forged += [report(f"invented-{i}", 1000, 3600.0) for i in range(1000)]
    for event in forged:
        s.on_supply_report(event, NOW + 0.5)
    assert s.supply.unvouched == len(forged)
    assert sources(s.core) == 2 and s.core.supply.rate_per_s() == 1000.0
    assert sum(n for _, n in s.supply.mix.counts()) == 1000


def test_a_gateways_report_is_bounded_by_a_gateways_rate_and_lifetime() -> None:
    """Even with a gateway's token (a gateway that went wrong), a report counts at most
    VENN_SUPPLY_MAX_RATE check-ins per second, and a claimed interval of an hour does not
    keep its source live for hours (the invented gateways stayed until a restart)."""
    core = make_scheduler("fifo", supply_reports=True)
    book = SupplyBook(NOW, TOKENS, max_rate=5000.0)
    assert book.report(core, report("gw-2", 100_000, token=gateway_token("gw-2")), NOW)
    assert core.supply.rate_per_s() == pytest.approx(5000.0)
    book.report(core, report("gw-3", 10, 3600.0, token=gateway_token("gw-3")), NOW)
    assert sources(core) == 2
    later = NOW + SOURCE_STALE_INTERVALS * MAX_INTERVAL_S + 1
    book.report(core, report("gw-2", 10, token=gateway_token("gw-2")), later)
    assert sources(core) == 1  # gw-3 is gone: its hour counted as a minute


def test_without_authentication_every_report_counts() -> None:
    core = make_scheduler("fifo", supply_reports=True)
    book = SupplyBook(NOW)
    assert book.report(core, report("gw-4", 10), NOW)
    assert sources(core) == 1
