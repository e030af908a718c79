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
from tests.suite_tally import SuiteTally

_MODULE_FAMILIES = {"test_http.py": "http", "test_generated.py": "generated"}


def _family_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    name = module.rsplit("/", 1)[-1]
    if "process" in nodeid.split("::", 1)[-1].split("[", 1)[0]:
        return "process"
    param = nodeid.partition("[")[2].rstrip("]")
    return _MODULE_FAMILIES.get(name) or (param.split("/", 1)[0] if "/" in param else "other")


_TALLY = SuiteTally("hostile corpus", "tests/hostile/", _family_of)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _TALLY.record(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    line = _TALLY.line()
    if line is not None:
        terminalreporter.write_line(line)
