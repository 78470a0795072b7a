from services.scheduler.stall import StallWatch


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
