"""Venn's long-running services (each runnable as `python -m services.<name>`)."""
