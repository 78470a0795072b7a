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
    # Once the loop ticks again, requests read later arrived when they were read.
    watch.tick(last + 1.53, last + 1.51)
    watch.tick(last + 1.555, last + 1.535)
    assert watch.arrived(last + 1.56) == last + 1.56
