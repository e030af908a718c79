# gfd — the two commands a fresh machine needs: `make demo` and `make test`.
# Needs only Python 3.11+, gcc, make and the package registries.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gfd-installed
C_SOURCES := $(wildcard gfd/*/*.c gfd/*/*.h)

.PHONY: demo test lint bench image lock clean

# Every dependency comes from requirements/ci.lock, hash-checked (pip included); gfd
# itself is then installed editable without build isolation, from the locked setuptools
# and nvidia-nvml-dev, so nothing unhashed is fetched. make lock regenerates the locks.
$(STAMP): pyproject.toml setup.py $(C_SOURCES) requirements/ci.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/ci.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -c "import gfd.topology._builder, gfd.sim; gfd.sim.library_path()"
	touch $(STAMP)

demo: $(STAMP)
	@echo "== labels of a simulated DGX H100 (gfd --simulate dgx-h100 --oneshot --output-file -)"
	@$(BIN)/gfd --simulate dgx-h100 --oneshot --no-timestamp --output-file - --log-level error
	@echo
	@echo "== GPU topology (gfd --simulate dgx-h100 topo)"
	@$(BIN)/gfd --simulate dgx-h100 topo --log-level error

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=15

lint: $(STAMP)
	$(BIN)/ruff check gfd tests bench
	$(BIN)/ruff format --check gfd tests bench
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# Builds the container image with a local Docker engine (see docs/container.md);
# on a machine with no image registry: BOOTSTRAP_BASE=1 make image
image:
	scripts/build-image.sh

# Re-resolve every lock file under requirements/ (image, build, CI) with hashes.
lock: $(STAMP)
	scripts/lock.sh

clean:
	rm -rf $(VENV) build *.egg-info gfd/*/*.so
