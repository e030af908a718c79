"""gfd's scheduling engine against a live kube-scheduler: the cases of
``tests/records/scheduler_cases.py`` run on a control plane of this module's own (etcd,
kube-apiserver, kube-scheduler from ``KUBEBUILDER_ASSETS``), each node alone and then all
together, exactly as the recorder runs them; gfd judges the pod as the API server stored
it (and the manifest) on the same nodes, with the assertions of the replay
(``tests/scheduling/test_scheduler_record.py``). Each case's live decisions are also held
to the record: a build that decides otherwise than the one recorded says so here.

The control plane is not the session's (``tests/realkube/conftest.py``): a scheduler there
would place the other tests' pods, and their nodes would be candidates here. A sample of
the cases runs (every third, and the hand-written edges of matchFields, taints and
tolerations, readiness, pod-level resources and overhead: 120 cases, about 70 s on two
cores); ``GFD_SCHEDULER_LIVE=all`` runs every case (about 150 s).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import ControlPlane, ControlPlaneError
from tests.oracles import oracle_path
from tests.realkube import conftest as realkube
from tests.records.scheduler_cases import (
    CASES,
    RECORD,
    RERECORD,
    CaseRunner,
    SchedulingCase,
    apply_merge_patch,
)
from tests.records.store import recorded_case
from tests.scheduling.against_scheduler import alone_disagreements, together_disagreements

pytestmark = [pytest.mark.oracle("kube-scheduler"), pytest.mark.slow]

ALL_ENV = "GFD_SCHEDULER_LIVE"
_EDGES = ("fields-", "taints-", "tol-", "notready-", "unreachable", "pod-level-", "overhead-")


def _sample() -> tuple[SchedulingCase, ...]:
    if os.environ.get(ALL_ENV) == "all":
        return CASES
    return tuple(
        case for number, case in enumerate(CASES)
        if number % 3 == 0 or case.case_id.startswith(_EDGES)
    )  # fmt: skip


SAMPLE = _sample()


@pytest.fixture(scope="module")
def runner() -> Iterator[CaseRunner]:
    assets = oracle_path("kube-scheduler")
    workdir = Path(tempfile.mkdtemp(prefix="gfd-scheduler-"))
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


def live(runner: CaseRunner, case: SchedulingCase) -> dict[str, Any]:
    """The case run on the live scheduler (once per module, for both tests)."""
    if case.case_id not in _live:
        try:
            _live[case.case_id] = runner.run_case(case)
        except Exception:
            print("\n".join(plane.describe_failure() for plane in _planes))
            raise
    return _live[case.case_id]


@pytest.mark.parametrize("case", SAMPLE, ids=lambda c: c.case_id)
def test_gfd_judges_each_case_as_the_live_scheduler(
    case: SchedulingCase, runner: CaseRunner
) -> None:
    result = live(runner, case)
    spec = apply_merge_patch(case.pod["spec"], result["stored_spec_patch"])
    found = alone_disagreements(case, result["per_node"], spec)
    if not case.admission_changes_the_pod:
        found += alone_disagreements(
            case, result["per_node"], case.pod["spec"], reasons=False, what="the manifest"
        )
    found += together_disagreements(case, result["together"], spec)
    if found:
        pytest.fail("gfd disagrees with kube-scheduler:\n" + "\n".join(found), pytrace=False)


@pytest.mark.parametrize("case", SAMPLE, ids=lambda c: c.case_id)
def test_the_live_scheduler_decides_as_recorded(case: SchedulingCase, runner: CaseRunner) -> None:
    result = live(runner, case)
    recorded = recorded_case(RECORD, case.case_id, case.inputs_hash, RERECORD)
    assert result["stored_spec_patch"] == recorded["stored_spec_patch"]
    assert result["per_node"] == recorded["per_node"]
    together, was = result["together"], recorded["together"]
    # Among nodes that fit, the scheduler's choice is its scores' (ties broken at random).
    assert together["message"] == was["message"]
    assert (together["scheduled_to"] is None) == (was["scheduled_to"] is None)
