# Fixflow: `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install constraints prometheus stunnel test test-deep test-fast lint typecheck demo bench clean

install: $(STAMP)

# Re-install only when the project's dependencies or their pinned versions change:
# pyproject.toml has the ranges, constraints.txt the exact versions tested.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,durable]"
	@touch $(STAMP)

# After changing a dependency in pyproject.toml: pin what the venv has now (its header kept).
constraints: install
	{ grep '^#' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable \
		| grep -viE '^fixflow( |=|@|$$)'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	@touch $(STAMP)

lint: install
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: install
	$(BIN)/mypy src

# The suite runs in TEST_WORKERS processes, each with its own SparkSession (TEST_WORKERS=0:
# this one): on 2 cores 3 workers overlap Spark's per-job waits, brokers and subprocesses
# (51.6 min for the clean-clone CI, against 60-76 min in one process). Modules sharing an
# expensive fixture (a standalone cluster, a live `fixflow run`) stay on one worker.
TEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

# Debian's prometheus package: its promtool checks and unit-tests the shipped alert rules
# (tests/pipeline/test_alerts.py). Installed with apt-get (sudo when not root) if missing.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
prometheus:
	@command -v promtool >/dev/null || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends prometheus; }

# Debian's stunnel4: the TLS end of the SASL_SSL listener of the Kafka security tests
# (tests/streams/secured.py; the embedded broker serves no TLS).
stunnel:
	@command -v stunnel4 >/dev/null || command -v stunnel >/dev/null || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends stunnel4; }

test: install lint typecheck prometheus stunnel
	$(BIN)/python -m pytest -q --durations=25 $(XDIST) $(PYTEST_ARGS)

# The deep run: the deletion property test with 18 random sequences per program instead of
# 2 (about an hour more than `make test`); run it before changing the update strategies.
test-deep: install lint typecheck prometheus stunnel
	FIXFLOW_DELETION_EXAMPLES=18 $(BIN)/python -m pytest -q --durations=25 $(XDIST) $(PYTEST_ARGS)

# The inner loop: no SparkSession, no broker, none of the slowest tests (markers applied
# in tests/conftest.py). `make test` still runs everything.
test-fast: install prometheus stunnel
	$(BIN)/python -m pytest -q -m "not spark and not kafka and not slow" $(PYTEST_ARGS)

demo: install
	$(BIN)/fixflow demo

bench: install
	$(BIN)/python bench/run_eval_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
