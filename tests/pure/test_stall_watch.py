from services.scheduler.stall import Remedy, StallWatch


def test_a_partition_with_records_and_no_reads_is_stalled_after_the_timeout() -> None:
    watch = StallWatch(stall_s=60)
    watch.observe("venn.jobs", 0, 10, behind=5, now=0)
    watch.observe("venn.jobs", 0, 10, behind=5, now=59)
    assert watch.stalled(59) == []
    watch.observe("venn.jobs", 0, 10, behind=5, now=61)
    assert watch.stalled(61) == [("venn.jobs", 0, 61)]


def test_progress_or_an_empty_backlog_is_not_a_stall() -> None:
    watch = StallWatch(stall_s=60)
    watch.observe("venn.jobs", 0, None, behind=3, now=0)
    watch.observe("venn.jobs", 0, 2, behind=1, now=50)  # read two records
    watch.observe("venn.checkins", 1, 7, behind=0, now=0)  # idle, nothing waiting
    watch.observe("venn.checkins", 1, 7, behind=0, now=100)
    assert watch.stalled(100) == []
    assert watch.stalled(111) == [("venn.jobs", 0, 61)]


def test_a_revoked_partition_is_forgotten() -> None:
    watch = StallWatch(stall_s=1)
    watch.observe("venn.jobs", 0, 1, behind=1, now=0)
    watch.observe("venn.jobs", 1, 1, behind=1, now=0)
    watch.forget_all_but({("venn.jobs", 1)})
    assert [s[:2] for s in watch.stalled(5)] == [("venn.jobs", 1)]


def test_the_position_to_fetch_again_from_is_the_last_one_observed() -> None:
    watch = StallWatch(stall_s=1)
    assert watch.position("venn.jobs", 0) is None
    watch.observe("venn.jobs", 0, 4, behind=2, now=0)
    watch.observe("venn.jobs", 0, 6, behind=1, now=1)
    assert watch.position("venn.jobs", 0) == 6


def test_a_partition_stalled_again_further_on_is_fetched_again_not_given_up() -> None:
    # Seen in CI: a replay's check-in partition stalled, was fetched again, moved on, and
    # stalled again further on; the second stall stopped the worker instead of a refetch.
    watch = StallWatch(stall_s=30, refetch_s=10)
    watch.observe("venn.checkins", 0, 100, behind=50, now=0)
    assert watch.remedy("venn.checkins", 0, seconds=11) is Remedy.REFETCH
    assert watch.remedy("venn.checkins", 0, seconds=16) is Remedy.WAIT
    watch.observe("venn.checkins", 0, 140, behind=20, now=40)  # the refetch helped
    assert watch.remedy("venn.checkins", 0, seconds=11) is Remedy.REFETCH
    # Stalled where it was fetched again: again every 10 s, given up at twice the stall time.
    assert watch.remedy("venn.checkins", 0, seconds=16) is Remedy.WAIT
    assert watch.remedy("venn.checkins", 0, seconds=21) is Remedy.REFETCH
    assert watch.remedy("venn.checkins", 0, seconds=26) is Remedy.WAIT
    assert watch.remedy("venn.checkins", 0, seconds=60) is Remedy.GIVE_UP


def test_a_partition_is_fetched_again_before_it_counts_as_stalled() -> None:
    watch = StallWatch(stall_s=30, refetch_s=10)
    watch.observe("venn.assignments", 3, 29, behind=33, now=0)
    assert watch.stalled(15) == []  # /healthz still passes
    assert watch.stalled(15, after=watch.refetch_s) == [("venn.assignments", 3, 15)]


def test_no_position_no_refetch_and_a_revoked_partition_starts_afresh() -> None:
    watch = StallWatch(stall_s=30)
    assert watch.remedy("venn.jobs", 0, seconds=99) is Remedy.WAIT
    watch.observe("venn.jobs", 0, 7, behind=1, now=0)
    assert watch.remedy("venn.jobs", 0, seconds=32) is Remedy.REFETCH
    watch.forget_all_but(set())
    watch.observe("venn.jobs", 0, 7, behind=1, now=100)
    assert watch.remedy("venn.jobs", 0, seconds=70) is Remedy.REFETCH
