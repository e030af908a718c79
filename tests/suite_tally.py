"""The closing line of a suite that counts its cases by family (reliability, hostile corpus).

A case is one test item (a parametrised variant is one case). ``family_of(nodeid)`` names
its family; the line reads ``<title>: N cases (fam a, ...), P passed, F failed``, then the
known defects (strict expected failures) and skips, if any. ``tests/closing_lines.py`` feeds
the tallies and prints their lines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest


class SuiteTally:
    def __init__(self, title: str, directory: str, family_of: Callable[[str], str]) -> None:
        self.title = title
        self.directory = directory
        self.family_of = family_of
        self.outcome: dict[str, str] = {}
        self.family: dict[str, str] = {}

    def record(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith(self.directory):
            return
        self.family[report.nodeid] = self.family_of(report.nodeid)
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
        counts = Counter(self.outcome.values())
        families = Counter(self.family[nodeid] for nodeid in self.outcome)
        by_family = ", ".join(f"{name} {families[name]}" for name in sorted(families))
        line = (
            f"{self.title}: {len(self.outcome)} cases ({by_family}), "
            f"{counts['passed']} passed, {counts['failed']} failed"
        )
        if counts["known"]:
            line += f", {counts['known']} known defect (strict xfail)"
        if counts["skipped"]:
            line += f", {counts['skipped']} skipped"
        return line


#: The reliability suite's modules, by the fault family each covers.
RELIABILITY_FAMILIES = {
    "test_nvml_faults.py": "nvml",
    "test_file_faults.py": "file",
    "test_api_faults.py": "api",
    "test_bad_input.py": "input",
    "test_pacing.py": "fleet",
    "test_reload_faults.py": "reload",
}


def reliability_family(nodeid: str) -> str:
    return RELIABILITY_FAMILIES.get(nodeid.split("::", 1)[0].rsplit("/", 1)[-1], "other")


#: The hostile corpus's modules whose cases are one family; elsewhere the family is the part
#: of the parameter id before ``/`` (``config/alias-bomb``), or ``process`` for a test that
#: runs gfd as a process.
_HOSTILE_MODULE_FAMILIES = {"test_http.py": "http", "test_generated.py": "generated"}


def hostile_family(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    name = module.rsplit("/", 1)[-1]
    if "process" in nodeid.split("::", 1)[-1].split("[", 1)[0]:
        return "process"
    param = nodeid.partition("[")[2].rstrip("]")
    if name in _HOSTILE_MODULE_FAMILIES:
        return _HOSTILE_MODULE_FAMILIES[name]
    return param.split("/", 1)[0] if "/" in param else "other"
