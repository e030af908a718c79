"""The reliability suite's fixtures, and the summary line it prints at the end of a run.

Cases are counted per test item (one parametrised variant is one case) and grouped by
the fault family their module covers; the line reads
``reliability: N cases (api a, file b, input c, nvml d), P passed, F failed`` followed by
the known defects (strict expected failures) and skips, if any.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    FAST_RETRIES,
    NAMESPACE,
    NODE,
    POD,
    TOKEN,
    client,
    cluster,
    emulator,
    kubeconfig,
    stop,
)
from tests.suite_tally import SuiteTally

HERE = Path(__file__).resolve().parent
FAMILIES = {
    "test_nvml_faults.py": "nvml",
    "test_file_faults.py": "file",
    "test_api_faults.py": "api",
    "test_bad_input.py": "input",
    "test_pacing.py": "fleet",
    "test_reload_faults.py": "reload",
}

#: Labels other writers own on the node; no fault may ever remove or change them.
FOREIGN_LABELS = {
    "kubernetes.io/hostname": NODE,
    "topology.kubernetes.io/zone": "zone-a",
    "example.com/rack": "r17",
}


# --------------------------------------------------------------------------- #
# Counting cases


def _family_of(nodeid: str) -> str:
    return FAMILIES.get(nodeid.split("::", 1)[0].rsplit("/", 1)[-1], "other")


_TALLY = SuiteTally("reliability", "tests/reliability/", _family_of)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _TALLY.record(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    line = _TALLY.line()
    if line is not None:
        terminalreporter.write_line(line)


# --------------------------------------------------------------------------- #
# The API server emulator: the shared fixtures, with other writers' labels on the node


@pytest.fixture
def node_labels() -> Mapping[str, str]:
    return FOREIGN_LABELS


@pytest.fixture
def request_timeout() -> float:
    return 0.5
