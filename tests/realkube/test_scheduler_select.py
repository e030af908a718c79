"""``gfd select``'s placement against a live kube-scheduler: the cases of
``tests/records/select_cases.py`` run on a control plane of this module's own (etcd,
kube-apiserver, kube-scheduler from ``KUBEBUILDER_ASSETS``) exactly as the recorder runs
them: the placement gfd prints now, put in a pod, each node alone. On each node the
scheduler must bind the pod exactly when the node meets the requirements
(``gfd.scheduling.select.meets``), as the replay (``tests/scheduling/test_select_record.py``)
asks of the record; and the live decisions must be the recorded ones (a build that decides
otherwise says so here).

The control plane is not the session's (``tests/realkube/conftest.py``): a scheduler there
would place the other tests' pods. Every case runs (137 cases, about 400 attempts: about
60 s on two cores).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import ControlPlane, ControlPlaneError
from tests.oracles import oracle_path
from tests.realkube import conftest as realkube
from tests.records.scheduler_cases import CaseRunner
from tests.records.select_cases import (
    CASES,
    RECORD,
    RERECORD,
    SelectCase,
    disagreements,
    run_case,
)
from tests.records.store import recorded_case

pytestmark = [pytest.mark.oracle("kube-scheduler"), pytest.mark.slow]


@pytest.fixture(scope="module")
def runner() -> Iterator[CaseRunner]:
    assets = oracle_path("kube-scheduler")
    workdir = Path(tempfile.mkdtemp(prefix="gfd-select-"))
    plane = ControlPlane(assets, workdir)
    try:
        plane.start()
        plane.start_scheduler(verbosity=4)
        case_runner = CaseRunner(plane.admin, plane.scheduler_log)
        case_runner.prepare()
    except ControlPlaneError as exc:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        pytest.fail(
            f"control plane with kube-scheduler did not start: {exc}\n{plane.describe_failure()}"
        )
    realkube._served.setdefault("version", plane.version)
    _planes.append(plane)
    yield case_runner
    _planes.remove(plane)
    plane.stop()
    shutil.rmtree(workdir, ignore_errors=True)


_live: dict[str, dict[str, Any]] = {}
_planes: list[ControlPlane] = []


def live(runner: CaseRunner, case: SelectCase) -> dict[str, Any]:
    """The case run on the live scheduler (once per module, for both tests)."""
    if case.case_id not in _live:
        try:
            _live[case.case_id] = run_case(runner, case)
        except Exception:
            print("\n".join(plane.describe_failure() for plane in _planes))
            raise
    return _live[case.case_id]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_the_live_scheduler_binds_exactly_where_the_requirements_are_met(
    case: SelectCase, runner: CaseRunner
) -> None:
    found = disagreements(case, live(runner, case))
    if found:
        pytest.fail(
            "the live kube-scheduler disagrees with meets():\n" + "\n".join(found), pytrace=False
        )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_the_live_scheduler_decides_as_recorded(case: SelectCase, runner: CaseRunner) -> None:
    result = live(runner, case)
    recorded = recorded_case(RECORD, case.case_id, case.inputs_hash, RERECORD)
    assert result["placement"] == recorded["placement"], (
        "gfd prints another placement than the recorded one: re-record with "
        "python -m tests.records.select_cases --record"
    )
    assert result.get("refused") == recorded.get("refused")
    assert result.get("per_node") == recorded.get("per_node")
