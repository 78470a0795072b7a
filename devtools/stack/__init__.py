"""Venn stacks: `Stack` (`local`), the one way to start a broker, the audit database and
the services in a run directory; `venn demo` on one (`demo`), its progress view
(`progress`), the services as child processes (`processes`) and the read-back of what the
topics carried (`capture`)."""
