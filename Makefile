# The two commands of the README: `make demo` and `make test`. Both create the
# environment (.venv) on first use.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml venn-flower/pyproject.toml | cksum | cut -d' ' -f1)

# Three pytest workers on two cores (the e2e modules mostly wait for trace time), each with
# its own broker and Postgres shared by its modules, each running whole modules (module-scoped
# stacks start once); tests/schedule.py hands out the longest first, never behind a long
# test. Not --dist loadgroup: with pytest 9.2 it silently stops grouping (pytest-xdist
# issue 1386).
PYTEST_WORKERS ?= -n 3 --dist loadfile --no-loadscope-reorder

# The project's own modules (editable installs): only files changed since the last run.
COMPILE = $(VENV)/bin/python -m compileall -q -j 0 venn services devtools bench loadtest ops tests venn-flower/venn_flower >/dev/null

.PHONY: demo flower-demo test lint bench clean compose-images compose-check

# Compiled once at install: machines that set PYTHONDONTWRITEBYTECODE (CI's does) never
# write a module's bytecode at import, so every process the suite starts (schedulers,
# gateways, Flower's SuperLink, SuperNodes and apps) compiled its imports again: 2.2 s of CPU
# for the scheduler's, 3.0 s for a `flwr` command, against 0.8 s compiled.
$(STAMP): pyproject.toml venn-flower/pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --no-compile -e '.[dev]' -e ./venn-flower
	$(VENV)/bin/python -m compileall -q -j 0 $(VENV)/lib >/dev/null
	rm -f $(VENV)/.installed-* && touch $(STAMP)

demo: $(STAMP)
	$(COMPILE)
	$(VENV)/bin/venn demo

# Venn schedules Flower: a private Venn stack, a SuperLink, 8 SuperNodes, 3 concurrent runs.
flower-demo: $(STAMP)
	$(COMPILE)
	$(VENV)/bin/python examples/flower/demo.py

# mypy runs beside pytest (one core's worth for a minute); either failing fails the target.
test: $(STAMP)
	$(COMPILE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@types=$$(mktemp); \
	$(VENV)/bin/mypy venn services devtools bench loadtest tests ops venn-flower/venn_flower >$$types 2>&1 & mypy=$$!; \
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=25 $(PYTEST_WORKERS); tests=$$?; \
	wait $$mypy; typed=$$?; echo "mypy:"; cat $$types; rm -f $$types; \
	test $$tests -eq 0 && test $$typed -eq 0

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy venn services devtools bench loadtest tests ops venn-flower/venn_flower

bench: $(STAMP)
	$(VENV)/bin/python -m bench.run_all

# docker-compose.yml under a real Docker engine (dockerd started and stopped if none runs),
# every image built here: ops/compose/ and docs/operations.md#docker-compose.
compose-images: $(STAMP)
	$(VENV)/bin/python -m ops.compose.images

compose-check: $(STAMP)
	$(VENV)/bin/python -m ops.compose.check

clean:
	rm -rf $(VENV) run
