from services.gateway.loop_watch import LoopWatch


def ticking(until: float, watch: LoopWatch | None = None) -> LoopWatch:
    watch = watch or LoopWatch(period=0.02)
    t = 0.0
    while t + watch.period <= until:
        watch.tick(t + watch.period + 0.001, t)  # on time, 1 ms of jitter
        t += watch.period + 0.001
    return watch


def test_before_the_first_tick_nothing_is_late() -> None:
    watch = LoopWatch(period=0.02)
    assert watch.lag(86_400.0) == 0.0
    assert watch.arrived(86_400.0) == 86_400.0


def test_a_request_read_while_the_loop_ticks_arrived_now() -> None:
    watch = ticking(1.0)
    assert watch.arrived(1.0) == 1.0
    assert watch.lag(1.0) < 0.01


def test_a_request_read_during_a_stall_may_have_waited_since_it_began() -> None:
    watch = ticking(1.0)
    last = watch._tick
    assert last is not None
    # The loop ran nothing for 1.5 s; the handler runs before the watcher's late tick.
    assert abs(watch.arrived(last + 1.5) - (last + 0.02)) < 1e-9
    assert watch.lag(last + 1.5) > 1.4


def test_a_request_read_just_after_the_watcher_saw_the_stall() -> None:
    watch = ticking(1.0)
    last = watch._tick
    assert last is not None
    watch.tick(last + 1.5, last)  # the watcher's tick ran first
    assert abs(watch.arrived(last + 1.51) - (last + 0.02)) < 1e-9
    assert watch.lag_s > 1.4
    # The watcher ticked again before the handler ran (a starved CPU): still the stall's.
    watch.tick(last + 1.53, last + 1.51)
    watch.tick(last + 1.555, last + 1.535)
    assert abs(watch.arrived(last + 1.9) - (last + 0.02)) < 1e-9
    # Past half the stall's length after it, requests read arrived when they were read.
    t = last + 1.555
    while t < last + 2.4:
        watch.tick(t + 0.021, t)
        t += 0.021
    assert watch.arrived(t) == t


def test_a_short_stall_is_remembered_for_two_periods() -> None:
    watch = ticking(1.0)
    last = watch._tick
    assert last is not None
    watch.tick(last + 0.06, last)  # 40 ms late
    assert abs(watch.arrived(last + 0.07) - (last + 0.02)) < 1e-9
    watch.tick(last + 0.081, last + 0.06)
    watch.tick(last + 0.102, last + 0.081)
    assert watch.arrived(last + 0.105) == last + 0.105
