"""The differential suite's closing line: cases compared against the reference, and how."""

from __future__ import annotations

from tests.conformance.differences import TALLY


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    line = TALLY.summary()
    if line is not None:
        terminalreporter.write_line(line)
