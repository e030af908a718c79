"""The hostile-input corpus's fixtures, and its closing line: how many cases ran, by family.

The line reads ``hostile corpus: N cases (config a, env b, ...), P passed, F failed``
(then skips, if any). A case is one test item; its family is the part of the
parameter id before ``/`` (``config/alias-bomb``), or the module's family for the
HTTP and generated cases.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    cluster,
    emulator,
    kubeconfig,
    node_labels,
    request_timeout,
)

_MODULE_FAMILIES = {"test_http.py": "http", "test_generated.py": "generated"}


class _Tally:
    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}
        self.family: dict[str, str] = {}

    def record(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        if not module.startswith("tests/hostile/"):
            return
        name = module.rsplit("/", 1)[-1]
        param = report.nodeid.partition("[")[2].rstrip("]")
        family = _MODULE_FAMILIES.get(name) or (param.split("/", 1)[0] if "/" in param else "other")
        if "process" in report.nodeid.split("::", 1)[-1].split("[", 1)[0]:
            family = "process"
        self.family[report.nodeid] = family
        previous = self.outcome.get(report.nodeid)
        if report.failed:
            self.outcome[report.nodeid] = "failed"
        elif report.skipped and previous != "failed":
            self.outcome[report.nodeid] = "skipped"
        elif report.when == "call" and previous is None:
            self.outcome[report.nodeid] = "passed"

    def line(self) -> str | None:
        if not self.outcome:
            return None
        counts = {kind: 0 for kind in ("passed", "failed", "skipped")}
        for result in self.outcome.values():
            counts[result] += 1
        families: dict[str, int] = {}
        for nodeid in self.outcome:
            families[self.family[nodeid]] = families.get(self.family[nodeid], 0) + 1
        by_family = ", ".join(f"{name} {families[name]}" for name in sorted(families))
        line = (
            f"hostile corpus: {len(self.outcome)} cases ({by_family}), "
            f"{counts['passed']} passed, {counts['failed']} failed"
        )
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
