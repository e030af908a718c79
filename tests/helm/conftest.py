"""Tags the chart suite's cases that used Helm's engine, for its closing line.

CI's log must show that the chart was linted and rendered by Helm v4 itself, not that the
suite was skipped: ``tests/closing_lines.py`` prints the engine's version (read from the
loaded library) and counts the cases tagged here, those that asked for the ``helm`` fixture.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.closing_lines import HELM_ENGINE


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and "helm" in getattr(item, "fixturenames", ()):
        report.user_properties.append((HELM_ENGINE, True))
    return report
