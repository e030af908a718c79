"""The closing line of the chart suite: which Helm judged the chart, and on how many cases.

CI's log must show that the chart was linted and rendered by Helm v4 itself, not that the
suite was skipped: this line names the engine's version (read from the loaded library) and
counts the cases of tests/helm that used it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

import pytest

from tests.helm.chart import _engine_or_reason

_outcomes: Counter[str] = Counter()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # Only the cases that asked for the engine (the ``helm`` fixture) count.
    if report.when == "call" and "helm" in getattr(item, "fixturenames", ()):
        _outcomes[report.outcome] += 1
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _outcomes:
        return
    sdk, reason = _engine_or_reason()
    if sdk is None:
        terminalreporter.write_line(f"helm chart suite: no engine: {reason}")
        return
    terminalreporter.write_line(
        f"helm chart suite: deploy/helm/gfd linted and rendered by Helm {sdk.helm_sdk_version()} "
        f"(helm-python-sdk {sdk.__version__}): {_outcomes['passed']} cases passed, "
        f"{_outcomes['failed']} failed"
    )
