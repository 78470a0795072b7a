"""Check-in partitions deciding with leases: at most D assignments per round and at most
one live assignment per device, however check-ins, grants, reports, offers, answers,
recalls and releases interleave, repeat or replay, and when partitions or the owner
restart from the rows they wrote (before their outputs went out)."""

from __future__ import annotations

from collections import defaultdict

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core import make_scheduler
from venn.core.lease import (
    Answer,
    Grant,
    LeaseBook,
    LeaseRule,
    Message,
    Offer,
    OwnedRoundRow,
    Recall,
    Report,
)
from venn.core.model import JobSpec, Requirement
from venn.core.partition import (
    Checkin,
    CheckinPartition,
    Decided,
    HoldRow,
    PartitionRow,
    pick_leased,
)
from venn.core.scheduler import Scheduler

NOW = 1000.0
DEVICES = 24


def new_core(policy: str = "fifo") -> Scheduler:
    core = make_scheduler(policy, track_devices=False)
    core.ranked = True
    return core


class Fleet:
    """P partitions, their owner's lease book, and every message ever sent (delivering
    one leaves it on the wire: it may come again, in any order). Each partition decides
    with a core of its own, as a worker does with its replica of the jobs: it counts its
    own assignments only, and a restarted one sees each open round's whole demand."""

    def __init__(
        self, partitions: int, demands: list[int], backstop: bool = True, policy: str = "fifo"
    ) -> None:
        self.policy = policy
        self.rule = LeaseRule(partitions, backstop=backstop)
        self.book = LeaseBook(self.rule)
        self.parts = [CheckinPartition(q, self.rule) for q in range(partitions)]
        self.stored: list[dict[str, bytes]] = [{} for _ in range(partitions)]
        self.wire: list[Message] = []
        self.demands = demands
        self.rnd = 0
        self.assigned: dict[int, int] = defaultdict(int)  # by round
        self.live: dict[str, tuple[str, int]] = {}  # device -> its live assignment
        self.cores = [self.new_core() for _ in range(partitions)]
        self.wire.extend(self.book.open_round("a", 0, demands[0]))

    def new_core(self) -> Scheduler:
        core = new_core(self.policy)
        for job in ("a", "b"):
            spec = JobSpec(job, Requirement.of({}), max(self.demands), len(self.demands), 60.0)
            core.add_job(spec, NOW)
        core.request_round("a", self.rnd, NOW, self.demands[self.rnd])
        return core

    def part_of(self, device: str) -> int:
        return int(device.removeprefix("d")) % len(self.parts)

    def apply(self, q: int, out: Decided) -> None:
        """Write the touched rows, then let the outputs go (the order a worker keeps)."""
        for job_id in out.touched:
            row = self.parts[q].row(job_id)
            if row is None:
                self.stored[q].pop(job_id, None)
            else:
                self.stored[q][job_id] = msgspec.json.encode(row)
        for row_id, hold_row in out.hold_rows.items():
            if hold_row is None:
                self.stored[q].pop(f"h:{row_id}", None)
            else:
                self.stored[q][f"h:{row_id}"] = msgspec.json.encode(hold_row)
        self.wire.extend(out.offers)
        self.wire.extend(out.reports)
        for a in out.assigned:
            assert a.job_id == "a"
            self.assigned[a.round_index] += 1
            live = self.live.get(a.device_id)
            js = self.cores[q].jobs[a.job_id]
            if live is not None and live == (a.job_id, js.round_index) and js.round_open:
                raise AssertionError(f"{a.device_id} got a second live assignment")
            self.live[a.device_id] = (a.job_id, a.round_index)

    def checkin(self, devices: list[str], serial: int) -> None:
        """Check-ins of one partition's devices in one event (the first one's partition)."""
        q = self.part_of(devices[0])
        core = self.cores[q]
        mine = [d for d in devices if self.part_of(d) == q]
        cs = [Checkin(f"c{serial}:{k}", d, core.slot_of({}), 0) for k, d in enumerate(mine)]
        draws = [((serial + k) * 0.618) % 1.0 for k in range(len(cs))]
        out = self.parts[q].decide(core, cs, NOW, draws=lambda: draws, source=f"e{serial}")
        self.apply(q, out)

    def deliver(self, msg: Message) -> None:
        if isinstance(msg, Report):
            self.wire.extend(self.book.on_report(msg))
        elif isinstance(msg, Offer):
            self.wire.extend(self.book.on_offer(msg))
        else:
            q = msg.partition
            part = self.parts[q]
            if isinstance(msg, Grant):
                self.apply(q, part.on_grant(msg))
            elif isinstance(msg, Recall):
                self.apply(q, part.on_recall(msg))
            else:
                source = f"answer:{msg.partition}:{msg.round_index}:{msg.offer}"
                self.apply(q, part.on_answer(self.cores[q], msg, NOW, source=source))

    def drain(self) -> None:
        """Deliver every message on the wire once, in order, and those sent meanwhile."""
        sent, self.wire = self.wire, []
        k = 0
        while k < len(sent) + len(self.wire):
            if k >= len(sent):
                sent, self.wire = sent + self.wire, []
            self.deliver(sent[k])
            k += 1
        self.wire = sent + self.wire

    def release(self, device: str) -> None:
        """The device's result came: the owner relays the release to its partition."""
        live = self.live.get(device)
        if live is None:
            return
        q = self.part_of(device)
        released = self.parts[q].release(device, *live)
        if released is not None:
            self.apply(q, released)
        del self.live[device]

    def restart(self, q: int) -> None:
        """Partition q starts afresh from the rows it wrote (a crash, or a move)."""
        part = self.parts[q] = CheckinPartition(q, self.rule)
        self.cores[q] = self.new_core()
        holds = {}
        for key, raw in self.stored[q].items():
            if key.startswith("h:"):
                holds[key.removeprefix("h:")] = msgspec.json.decode(raw, type=HoldRow)
            else:
                part.restore(msgspec.json.decode(raw, type=PartitionRow))
        part.restore_holds(holds)

    def restart_owner(self) -> None:
        """The owner starts afresh from the row of the open round it wrote."""
        row = self.book.export("a")
        self.book = LeaseBook(self.rule)
        if row is not None:  # through JSON, as the table stores it
            stored = msgspec.json.decode(msgspec.json.encode(row))
            self.book.restore(msgspec.convert(stored, OwnedRoundRow))

    def next_round(self) -> None:
        if self.rnd + 1 >= len(self.demands):
            return
        for core in self.cores:
            core.close_round("a", self.rnd, NOW, True)
        self.book.close_round("a", self.rnd)
        self.rnd += 1
        self.live = {d: h for d, h in self.live.items() if h[1] == self.rnd}
        for core in self.cores:
            core.request_round("a", self.rnd, NOW, self.demands[self.rnd])
        self.wire.extend(self.book.open_round("a", self.rnd, self.demands[self.rnd]))


@settings(max_examples=250, deadline=None)
@given(
    partitions=st.integers(1, 6),
    demands=st.lists(st.integers(0, 30), min_size=1, max_size=3),
    backstop=st.booleans(),
    ops=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 10**6)), min_size=100, max_size=400),
)
def test_at_most_demand_and_one_live_assignment_per_device(
    partitions: int, demands: list[int], backstop: bool, ops: list[tuple[int, int]]
) -> None:
    fleet = Fleet(partitions, demands, backstop)
    for serial, (kind, pick) in enumerate(ops):
        device = f"d{pick % DEVICES}"
        if kind <= 2:
            fleet.checkin([device], serial)
        elif kind == 3:  # several devices in one event: their holds share a row
            fleet.checkin([f"d{(pick + k * partitions) % DEVICES}" for k in range(3)], serial)
        elif kind <= 6 and fleet.wire:
            fleet.deliver(fleet.wire[pick % len(fleet.wire)])
        elif kind == 7:
            fleet.release(device)
        elif kind == 8:
            fleet.restart(pick % partitions)
        elif kind == 9:
            fleet.drain()
        elif kind == 10:
            fleet.restart_owner()
        elif pick % 5 == 0:
            fleet.next_round()
        for r, n in fleet.assigned.items():
            assert n <= demands[r], f"round {r}: {n} assignments for a demand of {demands[r]}"
        assert fleet.book.committed("a", fleet.rnd) <= demands[fleet.rnd]


@pytest.mark.parametrize("partitions", [1, 3, 12])
def test_a_round_fills_to_its_demand(partitions: int) -> None:
    """Every partition sees devices in turn and every message is delivered once: the
    round gets exactly D assignments, each device at most one."""
    fleet = Fleet(partitions, [20])
    serial = 0
    for _ in range(10):
        fleet.drain()
        fleet.wire.clear()
        for d in range(DEVICES):
            fleet.checkin([f"d{d}"], serial)
            serial += 1
    fleet.drain()
    assert fleet.assigned[0] == 20
    assert len(fleet.live) == 20


def test_a_held_device_is_declined_until_released() -> None:
    fleet = Fleet(1, [5])
    fleet.deliver(fleet.wire.pop(0))  # the one partition's grant: floor(5/2) = 2
    part = fleet.parts[0]
    first = part.decide(
        fleet.cores[0], [Checkin("c1", "d0", fleet.cores[0].slot_of({}), 0)], NOW, source="c1"
    )
    assert [a.device_id for a in first.assigned] == ["d0"]
    again = part.decide(
        fleet.cores[0], [Checkin("c2", "d0", fleet.cores[0].slot_of({}), 0)], NOW, source="c2"
    )
    assert again.declined == [("c2", "")] and not again.assigned
    assert part.release("d0", "a", 0) is not None
    third = part.decide(
        fleet.cores[0], [Checkin("c3", "d0", fleet.cores[0].slot_of({}), 0)], NOW, source="c3"
    )
    assert [a.device_id for a in third.assigned] == ["d0"]


def test_a_hold_ends_with_its_round() -> None:
    fleet = Fleet(1, [4, 4])
    fleet.deliver(fleet.wire.pop(0))
    part = fleet.parts[0]
    part.decide(
        fleet.cores[0], [Checkin("c1", "d0", fleet.cores[0].slot_of({}), 0)], NOW, source="c1"
    )
    assert part.busy(fleet.cores[0], "d0")
    fleet.next_round()
    assert not part.busy(fleet.cores[0], "d0")


def test_an_offered_device_waits_for_the_answer_and_survives_a_restart() -> None:
    """No quota (D < 2P): the device is offered; the partition restarts from its rows
    before the answer comes; the accepted answer still assigns the held device."""
    fleet = Fleet(3, [2])
    assert fleet.wire == []  # floor(2 / 6) = 0: everything in the reserve
    part = fleet.parts[1]
    core = fleet.cores[1]
    out = part.decide(core, [Checkin("c1", "d1", core.slot_of({}), 0, 50.0, 9e3)], NOW, source="e1")
    fleet.apply(1, out)
    assert out.held == ["c1"] and len(out.offers) == 1
    fleet.restart(1)
    assert fleet.parts[1].busy(fleet.cores[1], "d1")
    offer = fleet.wire.pop(0)
    assert isinstance(offer, Offer)
    (answer,) = fleet.book.on_offer(offer)
    assert isinstance(answer, Answer) and answer.accepted
    done = fleet.parts[1].on_answer(fleet.cores[1], answer, NOW, source="a1")
    assert [(a.device_id, a.checkin_id, a.speed_ms_per_sample) for a in done.assigned] == [
        ("d1", "c1", 50.0)
    ]
    # A second copy of the answer assigns nothing more.
    assert not fleet.parts[1].on_answer(fleet.cores[1], answer, NOW, source="a1").assigned


def test_rows_round_trip() -> None:
    fleet = Fleet(2, [10])
    while fleet.wire:
        fleet.deliver(fleet.wire.pop(0))
    for d in range(4):
        fleet.checkin([f"d{d}"], d)
    for q, part in enumerate(fleet.parts):
        row = part.row("a")
        assert row is not None
        again = msgspec.json.decode(msgspec.json.encode(row), type=PartitionRow)
        assert again == row and isinstance(again, PartitionRow)
        other = CheckinPartition(q, fleet.rule)
        other.restore(again)
        assert other.row("a") == row


def test_pick_leased_prefers_quota_then_offers_the_head() -> None:
    quota = {1: 0, 2: 3, 3: 1}.__getitem__
    assert pick_leased([2, 3], quota, lambda j: 1, False, 0.0, True) == (2, False)
    assert pick_leased([1, 2], quota, lambda j: 1, False, 0.0, True) == (1, True)
    assert pick_leased([1, 2], quota, lambda j: 0, False, 0.0, True) == (2, False)
    assert pick_leased([1, 2], quota, lambda j: 1, False, 0.0, False) == (2, False)
    assert pick_leased([1], quota, lambda j: 0, False, 0.0, True) == (-1, False)
    # uniform: among those with quota; an offer only when none has any
    assert pick_leased([1, 2, 3], quota, lambda j: 1, True, 0.99, True) == (3, False)
    none = {1: 0, 4: 0}.__getitem__
    assert pick_leased([1, 4], none, lambda j: 1, True, 0.99, True) == (4, True)
    assert pick_leased([1, 4], none, lambda j: 1, True, 0.0, False) == (-1, False)


def test_a_restarted_partition_keeps_the_quota_it_used() -> None:
    """Two devices take the partition's whole grant; it restarts from its rows; the
    round still gets exactly D: the rest only on offers out of the owner's reserve."""
    fleet = Fleet(1, [4])
    fleet.drain()
    for d in range(2):
        fleet.checkin([f"d{d}"], d)
    assert fleet.assigned[0] == 2
    fleet.restart(0)
    assert fleet.parts[0].busy(fleet.cores[0], "d0") and fleet.parts[0].busy(fleet.cores[0], "d1")
    for d in range(2, 8):
        fleet.checkin([f"d{d}"], d)
        fleet.drain()
    assert fleet.assigned[0] == 4


@pytest.mark.parametrize("policy", ["fifo", "random"])
def test_a_round_seen_by_one_partition_fills_under_any_policy(policy: str) -> None:
    """Only partition 2 of 3 sees devices: its own grants are not enough, so it offers
    the rest, for an ordered policy and a uniform one alike (a uniform policy that never
    offered left the round waiting for quota stranded on the other partitions)."""
    fleet = Fleet(3, [30], policy=policy)
    devices = [f"d{d}" for d in range(2, 300, 3)]  # partition 2's devices only
    for serial, device in enumerate(devices):
        fleet.checkin([device], serial)
        fleet.drain()
        fleet.wire.clear()  # delivered: drop the copies
    assert fleet.assigned[0] == 30


def test_a_device_s_latest_hold_is_the_one_restored() -> None:
    """A row keeps a void hold while it holds a live one of another round; the device's
    next hold, in a later row, is the one a restart restores."""
    rule = LeaseRule(1, backstop=False)
    core = new_core()
    for job in ("a", "b"):
        core.add_job(JobSpec(job, Requirement.of({}), 10, 3, 60.0), NOW)
        core.request_round(job, 0, NOW, 10)
    part = CheckinPartition(0, rule)
    part.on_grant(Grant("a", 0, 0, 2))
    part.on_grant(Grant("b", 0, 0, 2))
    slot = core.slot_of({})
    stored: dict[str, bytes] = {}

    def keep(out: Decided) -> None:
        for row_id, row in out.hold_rows.items():
            if row is None:
                stored.pop(row_id, None)
            else:
                stored[row_id] = msgspec.json.encode(row)

    # One event assigns x and y to the two jobs' rounds (fifo: a until its quota is used).
    first = part.decide(core, [Checkin(f"c{d}", d, slot, 0) for d in "uxy"], NOW, source="e1")
    keep(first)
    assert {a.device_id: a.job_id for a in first.assigned} == {"u": "a", "x": "a", "y": "b"}
    core.close_round("a", 0, NOW, True)
    core.request_round("a", 1, NOW, 10)
    part.on_grant(Grant("a", 1, 0, 2))
    second = part.decide(core, [Checkin("c2", "x", slot, 0)], NOW, source="e2")
    keep(second)
    assert [(a.device_id, a.round_index) for a in second.assigned] == [("x", 1)]
    assert "e1" in stored  # y's hold is live: the row stays, with x's void hold in it

    again = CheckinPartition(0, rule)
    again.restore_holds({k: msgspec.json.decode(v, type=HoldRow) for k, v in stored.items()})
    assert again.holds["x"] == ("a", 1) and again.holds["y"] == ("b", 0)
    assert again.busy(core, "x") and again.busy(core, "y") and not again.busy(core, "u")
    # The release of x rewrites its row; y's round ending empties the other.
    released = again.release("x", "a", 1)
    assert released is not None and released.hold_rows == {"e2": None}
    core.close_round("b", 0, NOW, True)
    assert again.sweep(core).hold_rows == {"e1": None}


def two_jobs(backstop: bool = False) -> tuple[Scheduler, CheckinPartition, int]:
    core = new_core()
    for job in ("a", "b"):
        core.add_job(JobSpec(job, Requirement.of({}), 10, 3, 60.0), NOW)
        core.request_round(job, 0, NOW, 10)
    part = CheckinPartition(0, LeaseRule(1, backstop=backstop))
    return core, part, core.slot_of({})


def stored_rows(outs: list[Decided]) -> dict[str, HoldRow]:
    """The hold rows as a table holds them after these outputs, through JSON."""
    stored: dict[str, bytes] = {}
    for out in outs:
        for row_id, row in out.hold_rows.items():
            if row is None:
                stored.pop(row_id, None)
            else:
                stored[row_id] = msgspec.json.encode(row)
    return {k: msgspec.json.decode(v, type=HoldRow) for k, v in stored.items()}


def test_a_replayed_event_s_row_is_the_latest() -> None:
    """An event replayed after a restart adds a hold to the row of its first run: the
    row takes a new number, so a void hold of the device in a later row does not win."""
    core, part, slot = two_jobs()
    part.on_grant(Grant("a", 0, 0, 2))
    part.on_grant(Grant("b", 0, 0, 5))
    outs = [part.decide(core, [Checkin("c1", "u", slot, 0)], NOW, source="e1")]
    outs.append(part.decide(core, [Checkin(f"c2{d}", d, slot, 0) for d in "wd"], NOW, source="e2"))
    assert part.holds == {"u": ("a", 0), "w": ("a", 0), "d": ("b", 0)}
    core.close_round("b", 0, NOW, True)  # d's hold is void; e2's row keeps w, not rewritten
    core.request_round("b", 1, NOW, 10)
    part.on_grant(Grant("b", 1, 0, 2))
    outs.append(part.decide(core, [Checkin("c3", "d", slot, 0)], NOW, source="e1"))  # a replay
    assert part.holds["d"] == ("b", 1)
    again = CheckinPartition(0, part.rule)
    again.restore_holds(stored_rows(outs))
    assert again.holds["d"] == ("b", 1) and again.busy(core, "d")


def test_a_hold_of_a_job_the_replica_has_not_read_is_kept() -> None:
    """A partition restored on a worker whose replica lags keeps the holds of rounds it
    does not know yet; only a round known to have ended, or a job gone, frees them."""
    core, part, slot = two_jobs()
    part.on_grant(Grant("a", 0, 0, 2))
    outs = [part.decide(core, [Checkin("c1", "d", slot, 0)], NOW, source="e1")]
    lagging = new_core()
    lagging.add_job(JobSpec("b", Requirement.of({}), 10, 3, 60.0), NOW)
    lagging.request_round("b", 0, NOW, 10)
    again = CheckinPartition(0, part.rule)
    again.restore_holds(stored_rows(outs))
    again.on_grant(Grant("b", 0, 0, 2))
    out = again.decide(lagging, [Checkin("c2", "d", lagging.slot_of({}), 0)], NOW, source="e2")
    assert out.declined == [("c2", "")] and not out.assigned and not out.hold_rows
    again.gone = {"a"}
    assert not again.busy(lagging, "d")


def test_devices_offered_to_an_ended_round_are_declined_and_offers_sent_again() -> None:
    core, part, slot = two_jobs(backstop=True)
    out = part.decide(core, [Checkin(f"c{d}", d, slot, 0) for d in "xy"], NOW, source="e1")
    assert [(o.job_id, o.offer, o.count) for o in out.offers] == [("a", 0, 2)]
    restored = CheckinPartition(0, part.rule)
    for job_id in out.touched:
        row = part.row(job_id)
        assert row is not None
        restored.restore(msgspec.json.decode(msgspec.json.encode(row), type=PartitionRow))
    assert restored.pending_offers() == out.offers  # to send again after a restart
    core.close_round("a", 0, NOW, False)
    swept = restored.sweep(core)
    assert sorted(swept.declined) == [("cx", ""), ("cy", "")]
    assert not restored.busy(core, "x") and restored.pending_offers() == []


def test_a_partition_with_an_unreadable_hold_row_waits_for_the_open_rounds_to_end() -> None:
    core, part, slot = two_jobs()
    part.unreadable = True  # as its caller sets it when a stored hold row does not decode
    part.on_grant(Grant("a", 0, 0, 5))
    out = part.decide(core, [Checkin("c1", "d", slot, 0)], NOW, source="e1")
    assert out.declined == [("c1", "")] and not out.assigned
    core.close_round("a", 0, NOW, True)
    core.request_round("a", 1, NOW, 10)
    part.on_grant(Grant("a", 1, 0, 5))
    out = part.decide(core, [Checkin("c2", "d", slot, 0)], NOW, source="e2")
    assert not out.assigned  # b's round 0 is still open
    core.close_round("b", 0, NOW, True)
    out = part.decide(core, [Checkin("c3", "d", slot, 0)], NOW, source="e3")
    assert [(a.job_id, a.round_index) for a in out.assigned] == [("a", 1)]
