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

.PHONY: demo flower-demo test lint bench clean compose-images compose-check

# --no-compile: Python compiles a module when it first imports it; compiling every file of
# every installed package up front is CPU a fresh CI run spends on code it never imports.
$(STAMP): pyproject.toml venn-flower/pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --no-compile -e '.[dev]' -e ./venn-flower
	rm -f $(VENV)/.installed-* && touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/venn demo

# Venn schedules Flower: a private Venn stack, a SuperLink, 8 SuperNodes, 3 concurrent runs.
flower-demo: $(STAMP)
	$(VENV)/bin/python examples/flower/demo.py

# mypy runs beside pytest (one core's worth for a minute); either failing fails the target.
test: $(STAMP)
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
