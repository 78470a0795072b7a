"""When a request read now may have reached the socket, judged from the event loop's ticks.

A check-in is answered within ``wait_s`` of its arrival, but the handler only learns of a
request once the loop reads it. On a CPU-starved process the bytes can sit in the socket
for seconds first: one check-in was answered 5.1 s after it was sent, against a 2 s bound
that the handler started counting only when it ran (issue 12, defect 8). A watcher task
ticks every ``period``; a tick that comes late says the loop ran nothing in between, so a
request read soon after may have waited since the missed tick was due.
"""

from __future__ import annotations

from dataclasses import dataclass

PERIOD_S = 0.02


@dataclass
class LoopWatch:
    period: float = PERIOD_S
    lag_s: float = 0.0
    """Lateness of the ticks, a decaying maximum (each tick halves the previous one)."""
    _tick: float | None = None
    """When the watcher last woke; None until its first tick, when nothing says the loop
    is late (a gateway answering its first request before the first tick shed it: the
    overdue time was counted from the loop clock's zero)."""
    _stall: tuple[float, float] = (0.0, 0.0)

    def tick(self, now: float, slept_from: float) -> None:
        """The watcher woke at `now` from a sleep of `period` begun at `slept_from`."""
        late = now - slept_from - self.period
        if late > self.period:
            self._stall = (slept_from + self.period, now)
        self._tick = now
        self.lag_s = max(late, self.lag_s * 0.5)

    def lag(self, now: float) -> float:
        """The ticks' lag, counting a tick that is overdue right now."""
        if self._tick is None:
            return self.lag_s
        return max(self.lag_s, now - self._tick - self.period)

    def arrived(self, now: float) -> float:
        """The earliest moment a request read at `now` may have arrived: `now` while the
        loop keeps ticking; the start of a stall in progress or one that just ended."""
        earliest = now
        if self._tick is None:
            return earliest
        overdue_since = self._tick + self.period
        if now - overdue_since > self.period:  # no tick for two periods: stalled now
            earliest = overdue_since
        stall_from, stall_to = self._stall
        # Read soon after a stall ended, or before any tick since: on a starved CPU the loop
        # reads the socket later than two periods after the stall's last tick (CI beside two
        # busy loops: such a check-in was taken for fresh and waited its whole bound again),
        # and the watcher may tick again before the handler runs (a CI run of b4715da: read
        # 0.4 s after a 1.5 s stall, answered 200 after its bound). What piled up during a
        # stall drains for a while after it: half the stall's length.
        soon = max(2 * self.period, (stall_to - stall_from) / 2)
        if now - stall_to <= soon or self._tick == stall_to:
            earliest = min(earliest, stall_from)
        return earliest
