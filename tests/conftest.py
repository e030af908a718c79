"""Suite-wide hooks: oracle suites are gated on their oracle and counted in the closing lines.

A test marked ``@pytest.mark.oracle("NAME")`` runs only where that oracle is present (see
``tests/oracles.py``); the terminal summary gives, per oracle, how many cases ran, and one line
for the oracle suites that were skipped and why.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import settings

from tests.oracles import ORACLES, oracle_path

# No test asserts on time (the machines are shared and noisy; performance is measured
# under bench/): hypothesis' per-example deadline is such an assertion, so it is off.
settings.register_profile("gfd", deadline=None)
settings.load_profile("gfd")

_ran: Counter[str] = Counter()
_failed: Counter[str] = Counter()
_skipped: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
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
    for name in _oracle_names(item):
        oracle_path(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    names = _oracle_names(item)
    if not names:
        return
    if report.skipped and report.when == "setup":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        for name in names:
            _skipped.setdefault(name, reason.removeprefix("Skipped: "))
    elif report.when == "call":
        for name in names:
            _ran[name] += 1
            if report.failed:
                _failed[name] += 1
    elif report.failed:
        for name in names:
            _failed[name] += 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    if _ran:
        cases = ", ".join(
            f"{name} {_ran[name]} cases ({_failed[name]} failed)" for name in sorted(_ran)
        )
        terminalreporter.write_line(f"oracle suites: {cases}")
    if _skipped:
        terminalreporter.write_line(
            "oracle suites skipped: "
            + "; ".join(f"{name}: {reason}" for name, reason in sorted(_skipped.items()))
        )
