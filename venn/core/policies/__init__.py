"""Scheduling policies behind one interface (see ``base.Policy``)."""

from venn.core.policies.base import Policy, PolicyView
from venn.core.policies.simple import FifoPolicy, RandomOrderPolicy, RandomPolicy, SrsfPolicy
from venn.core.policies.venn import IrsPolicy, LpPolicy

__all__ = [
    "FifoPolicy",
    "IrsPolicy",
    "LpPolicy",
    "Policy",
    "PolicyView",
    "RandomOrderPolicy",
    "RandomPolicy",
    "SrsfPolicy",
]
