"""What starts things, apart from the library: the local Apache Kafka, Tansu and PostgreSQL
launchers, the Venn stacks built on them (`venn up`, `venn demo`, the load test, the tests
and the benchmarks), and the Flower test bed.

`venn` never imports this package; the one exception is the CLI's stack commands
(`venn.cli.stack_commands`), which import it inside the commands that start a stack
(docs/architecture.md, "Layers"; tests/pure/test_layering.py holds it).
"""
