"""`VennStrategy`: any Flower Message-API strategy, with Venn choosing every round's nodes.

``configure_train``/``configure_evaluate`` ask Venn for the round's nodes (a round attempt
of the run's Venn job) and let the wrapped strategy build its messages over those nodes
only (`ChosenGrid`); each message carries its Venn round, so the node's launcher frees the
node in Venn the moment its reply is ready. The round loop sends through `RoundGrid`,
which ends a round at Venn's target (80% of its messages answered, ``close_at``) rather
than waiting for the slowest node. ``aggregate_*`` close the Venn round with the replies
that came, then aggregate as the wrapped strategy does.

When Venn is unreachable (the bridge or its broker does not answer) or silent (no device
and no Venn traffic at all for ``venn_wait_s``), the run keeps going: each round samples,
as Flower does, among the nodes it knows meet its requirement (the nodes Venn gave it, and
nodes that answered its profile query), with one log line saying so; every such round
first asks Venn again, and the run is back on Venn's nodes as soon as Venn answers.
``on_venn_down="wait"`` waits for Venn instead, for at most ``down_wait_s``.

Venn's decisions of every round (which nodes, how long it waited, why it fell back) go to
the run's log (`flwr log`).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from venn_flower.bridge import Bridge, VennRefused, VennUnavailable
from venn_flower.grids import ChosenGrid, RoundGrid
from venn_flower.nodes import EligibleNodes, nodes_of
from venn_flower.profile import device_name
from venn_flower.protocol import STALE_CODE, RoundTag, profile_of, profile_query, reply_mark, tag
from venn_flower.runlog import log, to_run_log

Phase = Literal["train", "evaluate"]
JOB_ID_KEY = "venn-job-id"
LEGACY_MARK = "legacy client_fn/NumPyClient"
ALIVE_S = 30.0
"""How often a round that waits for replies tells the bridge its run is alive."""
GATHER_S = 0.3
"""Once a round has enough nodes to start, how long it waits for more assigned with them."""


def job_id_for(run_id: int, run_config: Mapping[str, Any]) -> str:
    """The Venn job id of a Flower run: ``venn-job-id`` from its run config, else
    ``flwr-<run id>``."""
    given = run_config.get(JOB_ID_KEY)
    return given if isinstance(given, str) and given else f"flwr-{run_id}"


@dataclass(frozen=True)
class VennJob:
    """A Flower run as a Venn job.

    ``demand`` nodes are asked for per training round; ``evaluate_demand`` per federated
    evaluation round (None: ``demand`` when the wrapped strategy evaluates on nodes, its
    ``fraction_evaluate`` above 0, else none). A round starts once its demand is met, or
    after ``wait_s`` with at least ``min_nodes`` nodes (None: as many as the wrapped
    strategy insists on, FedAvg's ``min_*_nodes``, at least 1); fewer fail the attempt, and
    it is asked for again. ``deadline_s`` and ``workload_s`` are what Venn is told of a
    round.
    """

    job_id: str
    requirement: Mapping[str, float]
    demand: int
    min_nodes: int | None = None
    evaluate_demand: int | None = None
    wait_s: float = 60.0
    deadline_s: float = 300.0
    workload_s: float = 30.0

    def __post_init__(self) -> None:
        if self.demand < 1:
            raise ValueError(f"demand must be at least 1: {self.demand}")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.demand:
            raise ValueError(f"min_nodes must be in 1..demand ({self.demand}): {self.min_nodes}")
        if self.evaluate_demand is not None and self.evaluate_demand < 0:
            raise ValueError("evaluate_demand must be >= 0")
        if self.evaluate_demand and (self.min_nodes or 1) > self.evaluate_demand:
            raise ValueError("min_nodes must not exceed evaluate_demand")


@dataclass
class RoundRecord:
    """What one round of a run did: for logs, reports and checks."""

    phase: Phase
    server_round: int
    round_index: int
    """The Venn round attempt (-1: a round the run sampled itself, Venn unreachable)."""
    demand: int
    assigned: list[str]
    """Devices Venn assigned (the nodes' names in a sampled round)."""
    nodes: dict[str, int]
    """Devices that got a message, and their node ids."""
    opened_at: float
    started_at: float
    source: Literal["venn", "flower"] = "venn"
    target: int = 0
    sent: int = 0
    extra: dict[int, list[str]] = field(default_factory=dict)
    """Attempts that replaced nodes which left mid-round: index -> their devices."""
    window_until: float = 0.0
    """Until when (monotonic) the round takes nodes Venn assigns while it runs."""
    template: Message | None = field(default=None, repr=False)
    """The round's first message: what a node that joins later is sent."""
    dispatched: dict[str, float] = field(default_factory=dict)
    """Device -> when its message was sent (a node that joined later, later)."""
    closed_at: float | None = None
    close_s: float = 0.0
    """How long telling Venn of the close took."""
    replied: list[str] = field(default_factory=list)
    """Devices whose reply came back without an error."""
    outcome: str = ""


class TooFewNodes(RuntimeError):
    """A round got fewer than ``min_nodes`` usable nodes in every attempt allowed."""


class VennDown(RuntimeError):
    """Venn stayed unreachable longer than the run may wait (``on_venn_down="wait"``), or
    no node is known to meet the run's requirement while it is."""


class _Silent(Exception):
    """Neither a device nor any Venn traffic for ``venn_wait_s``."""


def _minimums(strategy: Strategy, evaluates: bool) -> int:
    """The fewest nodes the wrapped strategy insists on seeing in a round (FedAvg and its
    kin wait forever for ``min_available_nodes`` and ``min_train_nodes``, and for
    ``min_evaluate_nodes`` when there is federated evaluation)."""
    names = ["min_available_nodes", "min_train_nodes"]
    if evaluates:
        names.append("min_evaluate_nodes")
    found = [getattr(strategy, n) for n in names if isinstance(getattr(strategy, n, None), int)]
    return max(found, default=0)


def _fraction(strategy: Strategy, name: str) -> float | None:
    value = getattr(strategy, name, None)
    return float(value) if isinstance(value, int | float) else None


class VennStrategy(Strategy):
    """Wraps ``strategy``; ``bridge`` is the way to Venn (default: from the environment)."""

    def __init__(
        self,
        strategy: Strategy,
        job: VennJob,
        *,
        bridge: Bridge | None = None,
        close_at: float = 0.8,
        on_venn_down: Literal["sample", "wait"] = "sample",
        venn_wait_s: float = 60.0,
        down_wait_s: float = 600.0,
        probe_s: float = 2.0,
        max_attempts: int = 10,
        poll_s: float = 0.5,
        watch_s: float = 5.0,
        stream: bool = True,
        on_round: Callable[[RoundRecord], None] | None = None,
    ) -> None:
        if not isinstance(strategy, Strategy):
            raise TypeError(
                f"VennStrategy wraps Flower's Message-API strategies (flwr.serverapp.strategy, "
                f"e.g. FedAvg), not {type(strategy).__module__}.{type(strategy).__name__}: a "
                "legacy strategy (flwr.server.strategy) runs with ServerApp(server_fn=...), "
                "whose rounds Venn cannot see"
            )
        fraction_train = _fraction(strategy, "fraction_train")
        if fraction_train is not None and fraction_train < 1.0:
            raise ValueError(
                f"{type(strategy).__name__}(fraction_train={fraction_train:g}) would train on "
                "part of the nodes Venn assigns to a round and leave the rest idle while "
                "other runs wait: under Venn a round's size is the job's demand; use "
                "fraction_train=1.0 and set VennJob(demand=...)"
            )
        fraction_evaluate = _fraction(strategy, "fraction_evaluate")
        evaluate_demand = job.evaluate_demand
        if evaluate_demand is None:
            evaluate_demand = job.demand if (fraction_evaluate or 0.0) > 0 else 0
        elif evaluate_demand == 0 and (fraction_evaluate or 0.0) > 0:
            raise ValueError(
                f"{type(strategy).__name__}(fraction_evaluate={fraction_evaluate:g}) evaluates "
                "on nodes, but VennJob(evaluate_demand=0) asks Venn for none: set "
                "evaluate_demand (or leave it None: the training demand), or "
                "fraction_evaluate=0.0"
            )
        if evaluate_demand and fraction_evaluate is not None and fraction_evaluate < 1.0:
            raise ValueError(
                f"{type(strategy).__name__}(fraction_evaluate={fraction_evaluate:g}) would leave "
                "part of the nodes Venn assigns to an evaluation round idle: use "
                "fraction_evaluate=1.0 (or 0.0: no federated evaluation)"
            )
        need = _minimums(strategy, bool(evaluate_demand))
        smallest = min(job.demand, evaluate_demand or job.demand)
        if need > smallest:
            raise ValueError(
                f"the wrapped strategy waits for {need} nodes (its min_*_nodes) but a Venn "
                f"round has at most {smallest}: lower its min_*_nodes or raise the demand"
            )
        if job.min_nodes is not None and need > job.min_nodes:
            raise ValueError(
                f"the wrapped strategy waits for {need} nodes but a Venn round may start "
                f"with min_nodes={job.min_nodes}: lower its min_*_nodes or raise min_nodes"
            )
        self.min_nodes = job.min_nodes if job.min_nodes is not None else max(1, need)
        if not 0.0 < close_at <= 1.0:
            raise ValueError(f"close_at must be in (0, 1]: {close_at}")
        if on_venn_down not in ("sample", "wait"):
            raise ValueError(f"on_venn_down must be 'sample' or 'wait': {on_venn_down!r}")
        self.strategy = strategy
        self.job = job
        self.evaluate_demand = evaluate_demand
        self.bridge = bridge or Bridge.for_run({})
        self.close_at = close_at
        self.on_venn_down = on_venn_down
        self.venn_wait_s = venn_wait_s
        self.down_wait_s = down_wait_s
        self.probe_s = probe_s
        self.max_attempts = max_attempts
        self.poll_s = poll_s
        self.watch_s = watch_s
        self.stream = stream
        self.on_round = on_round
        self._more_at = 0.0
        self.records: list[RoundRecord] = []
        self.eligible = EligibleNodes(dict(job.requirement))
        self.mode: Literal["venn", "fallback"] = "venn"
        self.registered = False
        self._rounds = 0
        self._attempt = 0
        self._down_since: float | None = None
        self._open: RoundRecord | None = None
        self._unclosed: list[RoundRecord] = []
        """Venn attempts requested and not closed yet (closed once Venn answers)."""
        self._alive_at = 0.0
        self._warned: set[str] = set()
        self._grid: Grid | None = None

    @classmethod
    def for_run(
        cls,
        strategy: Strategy,
        context: Context,
        requirement: Mapping[str, float],
        demand: int,
        *,
        job: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> VennStrategy:
        """The usual way in a ServerApp: the run's Venn job (id from the run config's
        ``venn-job-id``, else ``flwr-<run id>``; ``job``: further `VennJob` fields) and the
        bridge from the run config and environment."""
        run_config = dict(context.run_config)
        venn_job = VennJob(
            job_id_for(context.run_id, run_config), requirement, demand, **dict(job or {})
        )
        return cls(strategy, venn_job, bridge=Bridge.for_run(run_config), **options)

    # -- the run -----------------------------------------------------------------------
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's round loop (through `RoundGrid`) between registering the run's Venn job
        and finishing it."""
        to_run_log()
        self._grid = grid
        self._rounds = num_rounds * (2 if self.evaluate_demand else 1)
        try:
            self._register()
        except VennUnavailable as exc:
            self._fall(f"registering the job: {exc}")
        try:
            result = super().start(
                RoundGrid(grid, self, poll_s=self.poll_s, watch_every_s=self.watch_s),
                initial_arrays,
                num_rounds,
                timeout,
                train_config,
                evaluate_config,
                evaluate_fn,
            )
        except BaseException as exc:
            why = f"Flower run failed: {exc!r}"[:200]
            if self._open is not None:
                self._close(self._open, [], why)
            self._quietly(lambda: self.bridge.cancel(self.job.job_id, why))
            raise
        self._close_unclosed()
        succeeded = sum(1 for r in self.records if r.outcome == "succeeded" and r.source == "venn")
        if not self._quietly(lambda: self.bridge.finish(self.job.job_id, succeeded)):
            log.warning("could not tell Venn job %s finished: Venn expires it", self.job.job_id)
        return result

    def _quietly(self, call: Callable[[], None]) -> bool:
        try:
            call()
        except (VennUnavailable, VennRefused) as exc:
            log.debug("Venn call failed: %s", exc)
            return False
        return True

    def _register(self) -> None:
        job = self.job
        normalized = self.bridge.register(
            job.job_id, job.requirement, job.demand, self._rounds, job.deadline_s, job.workload_s
        )
        self.registered = True
        if normalized:
            self.eligible.requirement = normalized
        log.info(
            "Venn job %s: requirement %s, demand %d (evaluation %d), rounds start with at "
            "least %d nodes, close at %.0f%% of their replies",
            job.job_id,
            dict(self.eligible.requirement),
            job.demand,
            self.evaluate_demand,
            self.min_nodes,
            self.close_at * 100,
        )

    def summary(self) -> None:
        self.strategy.summary()

    # -- falling back and coming back ----------------------------------------------------
    def _fall(self, why: str) -> None:
        if self.mode == "fallback":
            return
        self.mode = "fallback"
        self._down_since = time.monotonic()
        what = (
            "rounds sample among the nodes this run knows meet its requirement (Flower's "
            "sampling) until Venn is back"
            if self.on_venn_down == "sample"
            else f"rounds wait for Venn (at most {self.down_wait_s:.0f} s)"
        )
        log.warning("Venn unreachable (%s): %s", why, what)

    def _back(self, server_round: int) -> None:
        if self.mode == "venn":
            return
        self.mode = "venn"
        self._down_since = None
        log.info("Venn is back: round %d gets its nodes from Venn again", server_round)

    # -- choosing a round's nodes --------------------------------------------------------
    def _choose(self, phase: Phase, server_round: int, demand: int, grid: Grid) -> RoundRecord:
        if self.mode == "venn":
            try:
                chosen = self._from_venn(phase, server_round, demand, grid, probe=False)
                assert chosen is not None
                return chosen
            except (VennUnavailable, _Silent) as exc:
                self._fall(str(exc))
        while True:
            try:
                back = self._from_venn(phase, server_round, demand, grid, probe=True)
            except (VennUnavailable, _Silent):
                back = None
            if back is not None:
                return back
            if self.on_venn_down == "sample":
                sampled = self._sample(phase, server_round, demand, grid)
                if sampled is not None:
                    return sampled
            down_for = time.monotonic() - (self._down_since or time.monotonic())
            if down_for > self.down_wait_s:
                raise VennDown(
                    f"{phase} round {server_round}: Venn unreachable for {down_for:.0f} s"
                    + (
                        " and no online node is known to meet the run's requirement (nodes "
                        "answer the run's query only with answer_venn_queries(app) in their "
                        "ClientApp)"
                        if self.on_venn_down == "sample"
                        else ""
                    )
                )
            time.sleep(self.probe_s)

    def _from_venn(
        self, phase: Phase, server_round: int, demand: int, grid: Grid, probe: bool
    ) -> RoundRecord | None:
        """A Venn round attempt's nodes (None: a probe that heard nothing)."""
        for _ in range(self.max_attempts):
            if not self.registered:
                self._register()
            self._close_unclosed()
            index = self._attempt
            self._attempt += 1
            opened = time.time()
            record = RoundRecord(phase, server_round, index, demand, [], {}, opened, opened)
            self._unclosed.append(record)
            self.bridge.request_round(self.job.job_id, index, demand)
            limit = self.probe_s if probe else self.job.wait_s
            enough = self.min_nodes if self.stream else demand
            record.window_until = time.monotonic() + self.job.wait_s
            devices, silent = self._collect(index, demand, limit, enough=enough)
            if silent:
                self._close(record, [], "Venn silent: the run samples its own nodes")
                if probe:
                    return None
                raise _Silent(f"no node and no Venn traffic for {self.venn_wait_s:.0f} s")
            if probe:
                self._back(server_round)
                probe = False
                if len(devices) < enough:
                    left = self.job.wait_s - (time.time() - opened)
                    devices, _ = self._collect(index, demand, left, have=devices, enough=enough)
            record.assigned = devices
            record.nodes = nodes_of(devices, grid.get_nodes())
            record.started_at = time.time()
            if len(record.nodes) >= self.min_nodes:
                self.eligible.assigned(record.nodes)
                missing = sorted(set(devices) - set(record.nodes))
                log.info(
                    "round %d %s: %d node(s) from Venn in %.1f s (attempt %d): %s%s",
                    server_round,
                    phase,
                    len(record.nodes),
                    record.started_at - opened,
                    index,
                    ", ".join(sorted(device_name(d) for d in record.nodes)),
                    f"; not online in Flower: {', '.join(missing)}" if missing else "",
                )
                return record
            self._close(
                record,
                [],
                f"too few nodes: {len(record.nodes)} of at least {self.min_nodes}",
            )
        raise TooFewNodes(
            f"{phase} round {server_round}: fewer than {self.min_nodes} nodes in "
            f"{self.max_attempts} attempts"
        )

    def _collect(
        self,
        index: int,
        demand: int,
        limit_s: float,
        have: list[str] | None = None,
        enough: int | None = None,
    ) -> tuple[list[str], bool]:
        """The attempt's devices after waiting at most ``limit_s`` for ``demand`` (or for
        ``enough``, and then a moment for those assigned at the same time); True when Venn
        was silent: no device for that long (or ``venn_wait_s``, if shorter) and no Venn
        traffic at all for ``venn_wait_s``."""
        devices = list(have or [])
        start = time.monotonic()
        silent_after = min(limit_s, self.venn_wait_s)
        enough = demand if enough is None else min(enough, demand)
        while len(devices) < demand:
            if len(devices) >= enough:
                got = self.bridge.assignments(self.job.job_id, index, len(devices), GATHER_S)
                devices = got.devices
                break
            left = limit_s - (time.monotonic() - start)
            if left <= 0:
                break
            got = self.bridge.assignments(self.job.job_id, index, len(devices), min(left, 5.0))
            devices = got.devices
            quiet = got.heard_s is None or got.heard_s >= self.venn_wait_s
            if not devices and quiet and time.monotonic() - start >= silent_after:
                return devices, True
        return devices[:demand], False

    def _sample(
        self, phase: Phase, server_round: int, demand: int, grid: Grid
    ) -> RoundRecord | None:
        """Flower's sampling over the online nodes known to meet the requirement."""
        online = list(grid.get_node_ids())
        unasked = self.eligible.unasked(online)
        if len(self.eligible.online(online)) < demand and unasked:
            replies = grid.send_and_receive(
                [profile_query(n) for n in unasked], timeout=self.venn_wait_s
            )
            answered = {}
            for reply in replies:
                answered[reply.metadata.src_node_id] = profile_of(reply)
            for node in unasked:
                self.eligible.answered(node, answered.get(node))
            if not any(answered.values()) and "query" not in self._warned:
                self._warned.add("query")
                log.warning(
                    "no node answered query.venn (ClientApps without answer_venn_queries(app)"
                    "): while Venn is unreachable this run uses only nodes Venn gave it before"
                )
        known = self.eligible.online(online)
        if len(known) < self.min_nodes:
            return None
        picked = random.sample(sorted(known), min(demand, len(known)))
        now = time.time()
        names = {known[n]: n for n in picked}
        record = RoundRecord(
            phase, server_round, -1, demand, sorted(names), names, now, now, source="flower"
        )
        log.info(
            "round %d %s: Flower's sampling of %d among %d node(s) known to meet the "
            "requirement (Venn unreachable): %s",
            server_round,
            phase,
            len(picked),
            len(known),
            ", ".join(sorted(names)),
        )
        return record

    # -- rounds ------------------------------------------------------------------------
    def _configure(
        self,
        phase: Phase,
        server_round: int,
        demand: int,
        grid: Grid,
        build: Callable[[Grid], Iterable[Message]],
    ) -> list[Message]:
        record = self._choose(phase, server_round, demand, grid)
        self._open = record
        allowed = set(record.nodes.values())
        messages = list(build(ChosenGrid(grid, allowed)))
        strays = {m.metadata.dst_node_id for m in messages} - allowed
        idle = len(allowed) - len({m.metadata.dst_node_id for m in messages})
        if strays or idle > 0:
            why = (
                f"the wrapped strategy addressed nodes Venn did not assign: {sorted(strays)}"
                if strays
                else f"the wrapped strategy left {idle} of the {len(allowed)} nodes of the "
                "round idle (its sampling keeps part of them): under Venn a round's size is "
                "the job's demand"
            )
            self._close(record, [], why[:200])
            raise ValueError(why)
        record.sent = len(messages)
        record.target = self.target(len(messages))
        record.template = messages[0] if messages else None
        now = time.time()
        addressed = {m.metadata.dst_node_id for m in messages}
        record.dispatched = {d: now for d, n in record.nodes.items() if n in addressed}
        if record.source == "venn":
            round_tag = RoundTag(self.job.job_id, record.round_index)
            for message in messages:
                tag(message, round_tag)
        return messages

    def target(self, sent: int) -> int:
        """Good replies that end a round of ``sent`` messages: ``close_at`` of them (Venn's
        80%), at least ``min_nodes``; of the demand while the round still takes nodes."""
        if sent <= 0:
            return 0
        record = self._open
        if record is None:  # not a round's messages (the profile query): every reply
            return sent
        size = record.demand if self.open() else sent
        wanted = math.ceil(self.close_at * size - 1e-9)
        return min(size, max(self.min_nodes, wanted))

    def open(self) -> bool:
        """True while the round takes more nodes: Venn's, fewer than its demand, within its
        wait."""
        record = self._open
        return (
            self.stream
            and record is not None
            and record.source == "venn"
            and record.template is not None
            and len(record.assigned) < record.demand
            and time.monotonic() < record.window_until
        )

    def more(self) -> list[Message]:
        """The messages of nodes Venn assigned to the running round since it started (each
        sent the round's work as soon as it is free, not when the last one is)."""
        now = time.monotonic()
        record = self._open
        if not self.open() or record is None or now - self._more_at < self.poll_s:
            return []
        self._more_at = now
        try:
            got = self.bridge.assignments(
                self.job.job_id, record.round_index, len(record.assigned), 0.0
            )
        except (VennUnavailable, VennRefused):
            return []
        new = [d for d in got.devices if d not in record.assigned]
        if not new or self._grid is None or record.template is None:
            return []
        record.assigned.extend(new)
        in_round = set(record.nodes.values())
        found = {
            d: n for d, n in nodes_of(new, self._grid.get_nodes()).items() if n not in in_round
        }
        self.eligible.assigned(found)
        messages = [self._copy(record.template, node) for node in found.values()]
        round_tag = RoundTag(self.job.job_id, record.round_index)
        for message in messages:
            tag(message, round_tag)
        record.nodes.update(found)
        record.sent += len(messages)
        record.dispatched.update(dict.fromkeys(found, time.time()))
        if found:
            log.info(
                "round %d %s: %s joined (%d of %d)",
                record.server_round,
                record.phase,
                ", ".join(sorted(device_name(d) for d in found)),
                len(record.nodes),
                record.demand,
            )
        return messages

    @staticmethod
    def _copy(template: Message, node: int) -> Message:
        """The round's work for another node."""
        return Message(
            RecordDict(dict(template.content.items())),
            dst_node_id=node,
            message_type=template.metadata.message_type,
            group_id=template.metadata.group_id,
        )

    def waiting(self, lost: dict[str, Message], ok: int) -> list[Message]:
        """While a round's replies come in: keep the job alive in Venn, and send the work
        of nodes that left to nodes that replace them (Venn's, or sampled while Venn is
        unreachable), within the round's deadline."""
        now = time.monotonic()
        if self.mode == "venn" and self.registered and now - self._alive_at > ALIVE_S:
            self._alive_at = now
            self._quietly(lambda: self.bridge.alive(self.job.job_id))
        record = self._open
        if not lost or record is None or self._grid is None:
            return []
        gone = sorted(str(m.metadata.dst_node_id) for m in lost.values())
        log.info(
            "round %d %s: node(s) %s left mid-round; finding replacements",
            record.server_round,
            record.phase,
            ", ".join(gone),
        )
        return self._replace(record, list(lost.values()), self._grid)

    def _replace(self, record: RoundRecord, lost: list[Message], grid: Grid) -> list[Message]:
        in_round = set(record.nodes.values())
        found: dict[str, int] = {}
        index = -1
        began = time.monotonic()
        if record.source == "venn" and self.mode == "venn":
            until = time.monotonic() + self.job.wait_s
            devices: list[str] = []
            requested = 0
            try:
                while len(found) < len(lost) and time.monotonic() < until:
                    if len(devices) >= requested:
                        # (Again when a device Venn assigned is not an online node of this
                        # SuperLink, the one that just left say: ask for one more.)
                        index = self._attempt
                        self._attempt += 1
                        requested = len(lost) - len(found)
                        devices = []
                        record.extra[index] = devices
                        self.bridge.request_round(self.job.job_id, index, requested)
                    got = self.bridge.assignments(
                        self.job.job_id, index, len(devices), min(5.0, until - time.monotonic())
                    )
                    devices[:] = got.devices
                    online = nodes_of(devices, grid.get_nodes())
                    found.update(
                        {d: n for d, n in online.items() if n not in in_round and d not in found}
                    )
            except (VennUnavailable, VennRefused) as exc:
                log.info("no replacement from Venn: %s", exc)
            found = dict(list(found.items())[: len(lost)])
            self.eligible.assigned(found)
        elif record.source == "flower":
            known = self.eligible.online(grid.get_node_ids())
            spare = sorted(n for n in known if n not in in_round)
            picked = random.sample(spare, min(len(lost), len(spare)))
            found = {known[n]: n for n in picked}
        messages = []
        for (device, node), old in zip(found.items(), lost, strict=False):
            message = self._copy(old, node)
            if index >= 0:
                tag(message, RoundTag(self.job.job_id, index))
            record.nodes[device] = node
            record.assigned.append(device)
            record.dispatched[device] = time.time()
            messages.append(message)
        log.info(
            "round %d %s: %d replacement node(s)%s in %.1f s",
            record.server_round,
            record.phase,
            len(messages),
            f": {', '.join(sorted(device_name(d) for d in found))}" if found else "",
            time.monotonic() - began,
        )
        return messages

    def _replies(self, record: RoundRecord, replies: list[Message]) -> list[Message]:
        """Take venn_mod's marks off the replies; a clear error when the ClientApp lacks
        venn_mod or is a legacy one."""
        for reply in replies:
            if reply.has_error():
                reason = reply.error.reason or ""
                if LEGACY_MARK in reason:
                    raise TypeError(reason)
                continue
            ran, reported = reply_mark(reply)
            if record.source != "venn":
                continue
            if not ran:
                raise RuntimeError(
                    f"node {reply.metadata.src_node_id} replied without venn_mod: Venn cannot "
                    "free a node it does not hear from; build the ClientApp as "
                    "ClientApp(mods=[venn_mod]) (from venn_flower import venn_mod)"
                )
            if not reported and "launcher" not in self._warned:
                self._warned.add("launcher")
                log.warning(
                    "node %d's venn_mod found no launcher: start each SuperNode with "
                    "venn-flower-supernode, or Venn frees its nodes only at a round's close",
                    reply.metadata.src_node_id,
                )
        return replies

    def _close(self, record: RoundRecord, replies: list[Message], reason: str = "") -> None:
        if self._open is record:
            self._open = None
        device_of = {node: device for device, node in record.nodes.items()}
        record.replied = sorted(
            {
                device_of[r.metadata.src_node_id]
                for r in replies
                if not r.has_error() and r.metadata.src_node_id in device_of
            }
        )
        stale = sum(1 for r in replies if r.has_error() and r.error.code == STALE_CODE)
        ok = len(record.replied) >= self.min_nodes and not reason
        if not ok and not reason:
            reason = f"{len(record.replied)} replies of at least {self.min_nodes}"
        record.outcome = "succeeded" if ok else "failed"
        record.closed_at = time.time()
        if record.sent:  # what ended it, now that no node joins any more
            wanted = math.ceil(self.close_at * record.sent - 1e-9)
            record.target = min(record.sent, max(self.min_nodes, wanted))
        if record.source == "venn":
            told = time.monotonic()
            self._tell_venn(record, reason)
            record.close_s = time.monotonic() - told
        if record.sent:
            log.info(
                "round %d %s %s: %d of %d replies (target %d)%s in %.1f s",
                record.server_round,
                record.phase,
                record.outcome,
                len(record.replied),
                record.sent,
                record.target,
                f", {stale} refused as stale" if stale else "",
                record.closed_at - record.started_at,
            )
        self.records.append(record)
        if self.on_round is not None:
            self.on_round(record)

    def _tell_venn(self, record: RoundRecord, reason: str) -> None:
        replied = set(record.replied)
        try:
            for index, devices in record.extra.items():
                # One success per round: Venn counts a succeeded close as a round done.
                self.bridge.close_round(
                    self.job.job_id,
                    index,
                    "failed",
                    len(replied & set(devices)),
                    f"replacements of round attempt {record.round_index}, which counts them",
                    record.started_at,
                    record.started_at,
                    demand=max(1, len(devices)),
                    assigned=len(devices),
                )
            self.bridge.close_round(
                self.job.job_id,
                record.round_index,
                record.outcome,
                len(record.replied),
                reason,
                record.opened_at,
                record.started_at,
                demand=record.demand,
                assigned=len(record.assigned),
            )
        except VennUnavailable as exc:
            self._fall(f"closing round attempt {record.round_index}: {exc}")
            return
        if record in self._unclosed:
            self._unclosed.remove(record)

    def _close_unclosed(self) -> None:
        """Close the attempts an outage left open (Venn releases their nodes)."""
        for record in list(self._unclosed):
            if record is self._open:
                continue
            try:
                self.bridge.close_round(
                    self.job.job_id,
                    record.round_index,
                    record.outcome or "failed",
                    len(record.replied),
                    "closed after Venn was unreachable",
                    record.opened_at,
                    record.started_at,
                    demand=record.demand,
                    assigned=len(record.assigned),
                )
            except VennUnavailable:
                return
            self._unclosed.remove(record)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self._configure(
            "train",
            server_round,
            self.job.demand,
            grid,
            lambda view: self.strategy.configure_train(server_round, arrays, config, view),
        )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        if self._open is not None:
            record = self._open
            self._replies(record, replies)
            self._close(record, replies)
        good = [r for r in replies if not (r.has_error() and r.error.code == STALE_CODE)]
        return self.strategy.aggregate_train(server_round, good)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if not self.evaluate_demand:
            return []
        return self._configure(
            "evaluate",
            server_round,
            self.evaluate_demand,
            grid,
            lambda view: self.strategy.configure_evaluate(server_round, arrays, config, view),
        )

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        replies = list(replies)
        if self._open is not None:
            record = self._open
            self._replies(record, replies)
            self._close(record, replies)
        good = [r for r in replies if not (r.has_error() and r.error.code == STALE_CODE)]
        return self.strategy.aggregate_evaluate(server_round, good)
