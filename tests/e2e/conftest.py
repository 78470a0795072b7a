"""Fixtures of the end-to-end tests that more than one module uses."""

from tests.e2e.flower_stack import flower_venn

__all__ = ["flower_venn"]
