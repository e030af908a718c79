# gfd — the two commands a fresh machine needs: `make demo` and `make test`.
# Needs only Python 3.11+, gcc, make and the package registries.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two install stamps: what running gfd needs (make demo), then the test, lint and lock
# toolchain on top (make test, lint, bench, lock, chart). Either order works: make test
# alone builds the first stamp on its way.
RUNTIME_STAMP := $(VENV)/.gfd-runtime
STAMP  := $(VENV)/.gfd-installed
C_SOURCES := $(wildcard gfd/*/*.c gfd/*/*.h)

.PHONY: demo test test-stress lint bench chart dashboard image lock profiles clean

# Running gfd: the image's dependencies (requirements/image.lock: gfd with its kubernetes
# and metrics extras) and what building gfd's C parts needs (requirements/build.lock), all
# hash-checked; gfd itself is then installed editable without build isolation, so
# nothing unhashed is fetched. make lock regenerates the locks.
$(RUNTIME_STAMP): pyproject.toml setup.py $(C_SOURCES) requirements/image.lock requirements/build.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/image.lock -r requirements/build.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -c "import gfd.topology._builder, gfd.sim; gfd.sim.library_path()"
	touch $(RUNTIME_STAMP)

# Testing and linting: requirements/ci.lock (the test, lint and lock extras and pip
# itself, pinned alike), hash-checked, on top of the runtime.
$(STAMP): $(RUNTIME_STAMP) requirements/ci.lock
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/ci.lock
	touch $(STAMP)

# Each command is shown exactly as it runs, so it can be pasted from the repository root.
# A healthy simulated machine logs no warning: the one-shot's --log-level warning leaves out
# only its info lines (the health verdict, what was published), and topo logs nothing.
DEMO_LABELS := $(BIN)/gfd --simulate dgx-h100 --oneshot --no-timestamp --output-file - --log-level warning
DEMO_TOPO   := $(BIN)/gfd --simulate dgx-h100 topo

demo: $(RUNTIME_STAMP)
	@echo "== labels of a simulated DGX H100: $(DEMO_LABELS)"
	@$(DEMO_LABELS)
	@echo
	@echo "== GPU topology: $(DEMO_TOPO)"
	@$(DEMO_TOPO)
	@echo
	@echo "== gfd is installed in $(VENV). Run it as $(BIN)/gfd, or put it on PATH first:"
	@echo "   . $(BIN)/activate"
	@echo "   gfd --simulate dgx-a100 labels"
	@echo "   (more in README.md, 'Using it')"

test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --durations=15

# The suite where timing luck would show: five runs with every CPU kept busy, one serial
# run, and 200 stops of a periodic agent (scripts/test-stress.sh, docs/testing.md); about
# 40 minutes on 2 CPUs.
test-stress: $(STAMP)
	scripts/test-stress.sh

lint: $(STAMP)
	$(BIN)/ruff check gfd tests bench
	$(BIN)/ruff format --check gfd tests bench
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# The Helm chart as plain manifests, by Helm's own engine (helm-python-sdk, from ci.lock),
# without a helm binary: make chart VALUES=my-values.yaml > gfd.yaml (docs/deploy.md).
# VALUES takes files in Helm's -f order, SET Helm's --set expressions. Only the manifests
# reach stdout: setting up the environment, when needed, reports on stderr.
chart:
	@$(MAKE) -q $(STAMP) || $(MAKE) --no-print-directory $(STAMP) >&2
	@$(BIN)/python scripts/render_chart.py $(foreach file,$(VALUES),--values $(file)) \
		$(foreach expression,$(SET),--set $(expression)) \
		$(if $(RELEASE),--release $(RELEASE)) $(if $(NAMESPACE),--namespace $(NAMESPACE))

# The Grafana dashboard, built by Grafana's grafana-foundation-sdk (from ci.lock), into the
# chart (deploy/helm/gfd/dashboards/) and the kustomize component
# (deploy/components/grafana-dashboard/); tests/deploy/test_dashboard.py asks for it.
dashboard: $(STAMP)
	$(BIN)/python scripts/dashboard.py

# The bundled simulator profiles' parsed twins (gfd/sim/parsed_profiles.py), after a
# profile under gfd/sim/profiles/ was edited; tests/sim/test_parsed_profiles.py asks for it.
profiles: $(RUNTIME_STAMP)
	$(BIN)/python -c "from gfd.sim.parsed_profiles import main; raise SystemExit(main())"

# Builds the container image for linux/amd64 and linux/arm64 with a local Docker engine,
# then one OCI image index of both under one tag, dist/gfd_<version>.oci.tar, with buildah
# (see docs/container.md); on a machine with no image registry: BOOTSTRAP_BASE=1 make image
image:
	scripts/build-image.sh

# Re-resolve every lock file under requirements/ (image, build, CI) with hashes.
lock: $(STAMP)
	scripts/lock.sh

clean:
	rm -rf $(VENV) build *.egg-info gfd/*/*.so
