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


class _Tally:
    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}
        self.family: dict[str, str] = {}

    def record(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        if not module.startswith("tests/reliability/"):
            return
        name = module.rsplit("/", 1)[-1]
        self.family[report.nodeid] = FAMILIES.get(name, "other")
        previous = self.outcome.get(report.nodeid)
        if report.failed:
            self.outcome[report.nodeid] = "failed"
        elif report.skipped and previous != "failed":
            # A known defect (strict xfail) reports as skipped with ``wasxfail``.
            self.outcome[report.nodeid] = "known" if hasattr(report, "wasxfail") else "skipped"
        elif report.when == "call" and previous is None:
            self.outcome[report.nodeid] = "passed"

    def line(self) -> str | None:
        if not self.outcome:
            return None
        counts = {kind: 0 for kind in ("passed", "failed", "known", "skipped")}
        for result in self.outcome.values():
            counts[result] += 1
        families: dict[str, int] = {}
        for nodeid in self.outcome:
            families[self.family[nodeid]] = families.get(self.family[nodeid], 0) + 1
        by_family = ", ".join(f"{name} {families[name]}" for name in sorted(families))
        line = (
            f"reliability: {len(self.outcome)} cases ({by_family}), "
            f"{counts['passed']} passed, {counts['failed']} failed"
        )
        if counts["known"]:
            line += f", {counts['known']} known defect (strict xfail)"
        if counts["skipped"]:
            line += f", {counts['skipped']} skipped"
        return line


_TALLY = _Tally()


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
