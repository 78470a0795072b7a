"""Venn: a resource manager for collaborative (federated) learning jobs."""

__version__ = "0.1.0"
