"""The local runner: embedded stack (`venn up`/`venn down`) and `venn demo`."""
