"""The closing lines of a run: each suite's count, taken from the reports that reach the terminal.

``make test`` runs the suite in several worker processes (pytest-xdist); only the test
reports travel back to the process that prints the summary, and that process loads no
conftest below ``tests/``. So every closing line is counted here, from reports alone, and
works the same in a serial run. What a line needs beyond a report's outcome, a suite puts in
the report's ``user_properties`` where the test ran, under one of these keys:

- ``oracle``: the oracle a case ran against (``tests/conftest.py``, from its mark);
- ``helm-engine``: the case used Helm's engine (``tests/helm/conftest.py``);
- ``reference-verdict``: how a case compared with NVIDIA's GFD, and on what evidence
  (``tests/conformance/``, as :func:`tests.conformance.differences.verdict_record` writes it);
- ``kube-apiserver``: the real server's version a case ran against (``tests/realkube/conftest.py``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.conformance.differences import Tally as ReferenceTally
from tests.suite_tally import SuiteTally, hostile_family, reliability_family

ORACLE = "oracle"
HELM_ENGINE = "helm-engine"
REFERENCE_VERDICT = "reference-verdict"
KUBE_APISERVER = "kube-apiserver"

_oracle_ran: Counter[str] = Counter()
_oracle_failed: Counter[str] = Counter()
_oracle_skipped: dict[str, str] = {}
_helm: Counter[str] = Counter()
_reference = ReferenceTally()
_realkube: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}
_realkube_server: dict[str, str] = {}
_tallies = (
    SuiteTally("reliability", "tests/reliability/", reliability_family),
    SuiteTally("hostile corpus", "tests/hostile/", hostile_family),
)


def _properties(report: pytest.TestReport, key: str) -> list[Any]:
    return [value for name, value in report.user_properties if name == key]


def _count_oracles(report: pytest.TestReport) -> None:
    names = _properties(report, ORACLE)
    if report.skipped and report.when == "setup":
        longrepr = report.longrepr
        reason = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
        reason = reason.removeprefix("Skipped: ")
        # Only a missing oracle's skip (tests.oracles.oracle_path) says the suite was skipped;
        # a case can skip for another reason (no Docker daemon) where its oracle is present.
        if reason.startswith("oracle "):
            for name in names:
                _oracle_skipped.setdefault(name, reason)
    elif report.when == "call":
        for name in names:
            _oracle_ran[name] += 1
            _oracle_failed[name] += report.failed
    elif report.failed:
        for name in names:
            _oracle_failed[name] += 1


def _count_realkube(report: pytest.TestReport) -> None:
    if not report.nodeid.startswith("tests/realkube/"):
        return
    for version in _properties(report, KUBE_APISERVER):
        _realkube_server["version"] = version
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _realkube["failed" if report.failed else report.outcome] += 1


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _count_oracles(report)
    _count_realkube(report)
    for tally in _tallies:
        tally.record(report)
    if report.when == "call":
        if _properties(report, HELM_ENGINE):
            _helm[report.outcome] += 1
        for value in _properties(report, REFERENCE_VERDICT):
            _reference.record(value)


def _helm_line() -> str | None:
    if not _helm:
        return None
    # Imported only when the chart suite ran: loading the engine is not free.
    from tests.helm.chart import _engine_or_reason

    sdk, reason = _engine_or_reason()
    if sdk is None:
        return f"helm chart suite: no engine: {reason}"
    return (
        f"helm chart suite: deploy/helm/gfd linted and rendered by Helm {sdk.helm_sdk_version()} "
        f"(helm-python-sdk {sdk.__version__}): {_helm['passed']} cases passed, "
        f"{_helm['failed']} failed"
    )


def _realkube_line() -> str | None:
    if "version" not in _realkube_server:
        return None
    counts = ", ".join(f"{n} {what}" for what, n in _realkube.items() if n)
    return (
        f"real-server suite (tests/realkube): {sum(_realkube.values())} cases ({counts}) "
        f"against kube-apiserver {_realkube_server['version']}"
    )


def _oracle_lines() -> list[str]:
    lines = []
    if _oracle_ran:
        cases = ", ".join(
            f"{name} {_oracle_ran[name]} cases ({_oracle_failed[name]} failed)"
            for name in sorted(_oracle_ran)
        )
        lines.append(f"oracle suites: {cases}")
    if _oracle_skipped:
        lines.append(
            "oracle suites skipped: "
            + "; ".join(f"{name}: {reason}" for name, reason in sorted(_oracle_skipped.items()))
        )
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [tally.line() for tally in _tallies]
    lines += [_helm_line(), _reference.summary(), _realkube_line(), *_oracle_lines()]
    for line in lines:
        if line is not None:
            terminalreporter.write_line(line)
