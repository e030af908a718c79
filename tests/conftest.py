"""Suite-wide hooks: oracle suites are gated on their oracle and counted in the closing lines.

A test marked ``@pytest.mark.oracle("NAME")`` runs only where that oracle is present (see
``tests/oracles.py``); its reports name the oracle, so that the terminal summary
(``tests/closing_lines.py``) gives, per oracle, how many cases ran, and one line for the
oracle suites that were skipped and why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests import closing_lines
from tests.closing_lines import ORACLE
from tests.host import running_test
from tests.oracles import ORACLES, oracle_path

# No test asserts on time (the machines are shared and noisy; performance is measured
# under bench/): hypothesis' per-example deadline is such an assertion, so it is off.
settings.register_profile("gfd", deadline=None)
settings.load_profile("gfd")

#: How many workers make test runs, which tests run together, which first (pytest-xdist).
pytest_plugins = ["tests.parallel", "tests.host_guard"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stress",
        action="store_true",
        help="also run the tests marked stress (minutes each; make test-stress)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--stress"):
        return
    kept = [item for item in items if item.get_closest_marker("stress") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    # Each suite's closing line is counted where every report arrives.
    config.pluginmanager.register(closing_lines, "gfd-closing-lines")
    config.addinivalue_line(
        "markers", "oracle(name): the test runs against a third-party oracle (tests/oracles.py)"
    )


def _oracle_names(item: pytest.Item) -> list[str]:
    names = []
    for mark in item.iter_markers("oracle"):
        (name,) = mark.args
        if name not in ORACLES:
            raise pytest.UsageError(f"{item.nodeid}: unknown oracle {name!r}")
        names.append(name)
    return names


def pytest_runtest_setup(item: pytest.Item) -> None:
    names = _oracle_names(item)
    # Tagged before the oracles are looked for: a skip's report names them all too.
    item.user_properties.extend((ORACLE, name) for name in names)
    for name in names:
        oracle_path(name)


@pytest.fixture(scope="session", autouse=True)
def _the_session_host(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A session's or module's fixture set up before any test ran gets a host too."""
    running_test("session", tmp_path_factory)


@pytest.fixture(autouse=True)
def _the_running_test(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """gfd run in-process by a test sees the test's own host (``tests/host.py``)."""
    running_test(request.node.nodeid, tmp_path_factory)


@pytest.fixture(scope="session", autouse=True)
def _files_of_the_process_go_with_the_run() -> Iterator[None]:
    """Files that live as long as the process that made them, removed at its exit: the
    simulator's per-branch library copies, and the Kubernetes client's copies of a
    kubeconfig's inline certificates (its atexit handler). A test process ends after the
    host guard looks at its temp folder (tests/host_guard.py), so they go when the run's
    last test does, as they would when gfd's process ends."""
    yield
    simulator = sys.modules.get("gfd.sim")
    if simulator is not None:
        simulator.remove_simulated_files()
    kube_config = sys.modules.get("kubernetes.config.kube_config")
    if kube_config is not None:
        kube_config._cleanup_temp_files()
