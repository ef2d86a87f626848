# cdlaw — set-up and everyday commands. `make demo` and `make test` work on a fresh clone.
#
# torch is pinned to a CPU build by default: an unpinned torch pulls a multi-GB CUDA wheel.
# GPU users: make setup TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--extra-index-url https://download.pytorch.org/whl/cu128"
PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
EXTRAS     ?= dev
BIN        := $(VENV)/bin
CDLAW      := $(BIN)/cdlaw
comma      := ,
# One stamp per set of extras, so `make test EXTRAS=dev,ray` installs ray even after a plain setup.
STAMP      := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: setup setup-base test test-all test-fast demo bench lint typecheck format clean

setup: $(STAMP)

# The base install alone, for the README's quick start: fit, plan, plot, report and status,
# without torch, transformers or the dev tools. `make setup` adds them to the same .venv.
BASE_STAMP := $(VENV)/.installed-base
setup-base: $(BASE_STAMP)

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $(BASE_STAMP)

# torch and transformers in one pip command, so transformers cannot pick a CUDA torch.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_INDEX) "$(TORCH_SPEC)" -e ".[$(EXTRAS)]"
	touch $(STAMP)

# Two pytest workers (pytest-xdist): every training test uses one thread, so two share a
# 2-core machine without slowing each other (the suite: ~9 min against ~15 min in one).
# TEST_WORKERS=0 runs it in one process, e.g. to debug a failure.
TEST_WORKERS ?= 2

test: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# Every optional extra installed (Ray, the trackers, lm-eval), so no test skips for a missing package.
test-all:
	$(MAKE) test EXTRAS=dev,ray,trackers,lm-eval

test-fast: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow"

demo: setup
	bash scripts/demo.sh

bench: setup
	$(BIN)/python benchmarks/bench_fit.py
	$(BIN)/python benchmarks/bench_train.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
