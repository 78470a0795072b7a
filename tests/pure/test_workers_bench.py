"""bench/workers_bench.py's summary of a py-spy profile (raw, collapsed stacks)."""

from __future__ import annotations

from bench.workers_bench import profile_summary

RAW = """\
main (a.py:1);run (venn/a.py:5);decide (venn/b.py:9) 6
main (a.py:1);run (venn/a.py:5);encode (aiokafka/c.py:3) 3
main (a.py:1);idle (a.py:7) 1
not a sample line
"""


def test_self_and_total_shares() -> None:
    summary = profile_summary(RAW)
    assert summary["samples"] == [("all", 10.0)]
    assert summary["self"][0] == ("decide (venn/b.py:9)", 60.0)
    assert dict(summary["self"]) == {
        "decide (venn/b.py:9)": 60.0,
        "encode (aiokafka/c.py:3)": 30.0,
        "idle (a.py:7)": 10.0,
    }
    # Only Venn's and the Kafka libraries' frames count anywhere on the stack.
    assert dict(summary["total"]) == {
        "run (venn/a.py:5)": 90.0,
        "decide (venn/b.py:9)": 60.0,
        "encode (aiokafka/c.py:3)": 30.0,
    }


def test_a_frame_twice_on_one_stack_counts_once() -> None:
    summary = profile_summary("f (venn/x:1);f (venn/x:1);g (venn/x:2) 4\n")
    assert dict(summary["total"])["f (venn/x:1)"] == 100.0


def test_empty() -> None:
    assert profile_summary("") == {"samples": [("all", 0.0)], "self": [], "total": []}
