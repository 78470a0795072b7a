"""Benchmarks: each compares against a baseline measured in the same run and writes its
figures under docs/results/ (`python -m bench.<name>`; `make bench` lists them). Shared:
`bench.common` (preamble, run metadata, generated blocks) and `bench.gateway_load` (the
open-loop check-in load on a gateway). Tests import no benchmark."""
