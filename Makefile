# The two commands of the README: `make demo` and `make test`. Both create the
# environment (.venv) on first use.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

# Two pytest workers, each with its own broker and Postgres, each running whole modules (their
# module-scoped stacks start once); tests/conftest.py hands out the long e2e modules first.
PYTEST_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: demo flower-demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/venn demo

# Venn schedules Flower: a private Venn stack, a SuperLink, 8 SuperNodes, 3 concurrent runs.
flower-demo: $(STAMP)
	$(VENV)/bin/python examples/flower/demo.py

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy venn services bench loadtest tests
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=25 $(PYTEST_WORKERS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy venn services bench loadtest tests

bench: $(STAMP)
	$(VENV)/bin/python bench/run_all.py

clean:
	rm -rf $(VENV) run
