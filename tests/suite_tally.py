"""The closing line of a suite that counts its cases by family (reliability, hostile corpus).

A case is one test item (a parametrised variant is one case). ``family_of(nodeid)`` names
its family; the line reads ``<title>: N cases (fam a, ...), P passed, F failed``, then the
known defects (strict expected failures) and skips, if any.
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
