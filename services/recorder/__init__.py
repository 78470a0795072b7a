"""The audit recorder: venn.rounds + venn.jobs -> audit DB, bad input -> dead letters."""

from services.recorder.app import RecorderStats, RecorderTopics, run_recorder

__all__ = ["RecorderStats", "RecorderTopics", "run_recorder"]
