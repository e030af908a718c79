"""gfd's scheduling engine held to kube-scheduler v1.36's recorded decisions.

``tests/records/kube-scheduler/verdicts.json`` holds, per case of
``tests/records/scheduler_cases.py``, what kube-scheduler decided for the candidate pod on
each node alone and on all the case's nodes together, with the pod as the API server
stored it (``stored_spec_patch``). Here, always (CI included), gfd judges the same pod on
the same nodes:

- the corpus still makes the inputs that were recorded (a changed case names the command
  that re-records it);
- each node alone: gfd's ``fits`` on the stored pod is the scheduler's, and where the pod
  does not fit, the reasons of gfd's first failing filter are the scheduler's;
- each node alone, from the manifest as a user wrote it (which has not been through the
  API server's defaulting and admission): gfd's ``fits`` is the scheduler's, except for
  pods naming a RuntimeClass, whose overhead and scheduling admission adds;
- together: the node the scheduler chose is one gfd says fits; or, when the scheduler fits
  none, gfd fits none and counts the nodes per reason as the scheduler's message does.

``tests/realkube/test_scheduler.py`` runs the cases on a live kube-scheduler instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.records.scheduler_cases import (
    CASES,
    NOT_READY,
    RECORD,
    REFUSED,
    RERECORD,
    UNSCHEDULABLE,
    RefusedCase,
    SchedulingCase,
    available_of,
    reason_histogram,
    stored_spec,
)
from tests.records.store import load_record, recorded_case
from tests.scheduling.against_scheduler import alone_disagreements, together_disagreements

MANIFEST_CASES = tuple(c for c in CASES if not c.admission_changes_the_pod)


def _recorded(case: SchedulingCase | RefusedCase) -> dict[str, Any]:
    return recorded_case(RECORD, case.case_id, case.inputs_hash, RERECORD)


def _fail_on(found: list[str]) -> None:
    if found:
        pytest.fail("gfd disagrees with kube-scheduler:\n" + "\n".join(found), pytrace=False)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_each_node_alone_as_the_scheduler_judged_it(case: SchedulingCase) -> None:
    recorded = _recorded(case)
    _fail_on(alone_disagreements(case, recorded["per_node"], stored_spec(case, recorded)))


@pytest.mark.parametrize("case", MANIFEST_CASES, ids=lambda c: c.case_id)
def test_each_node_alone_from_the_manifest(case: SchedulingCase) -> None:
    recorded = _recorded(case)
    _fail_on(
        alone_disagreements(
            case, recorded["per_node"], case.pod["spec"], reasons=False, what="the manifest"
        )
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_the_nodes_together_as_the_scheduler_judged_them(case: SchedulingCase) -> None:
    recorded = _recorded(case)
    _fail_on(together_disagreements(case, recorded["together"], stored_spec(case, recorded)))


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.case_id)
def test_what_the_api_server_refuses_is_recorded_refused(case: RefusedCase) -> None:
    refused = _recorded(case)["refused"]
    assert refused["status"] == 422 and refused["reason"] == "Invalid", refused


def test_every_recorded_case_is_still_a_case() -> None:
    assert set(load_record(RECORD).cases) == {c.case_id for c in (*CASES, *REFUSED)}


def test_the_record_is_of_kube_scheduler_1_36() -> None:
    record = load_record(RECORD)
    assert record.program == "kube-scheduler"
    assert record.version.startswith("v1.36.")
    assert record.notes["built"]


def test_each_verdict_is_one_of_the_two_a_scheduler_gives() -> None:
    """Bound (no message), or unschedulable with a message counting the case's nodes."""
    record = load_record(RECORD)
    for case in CASES:
        recorded = record.cases[case.case_id]
        for name, verdict in recorded["per_node"].items():
            assert verdict["fits"] == (verdict["message"] is None), (case.case_id, name)
            if verdict["message"] is not None:
                assert available_of(verdict["message"]) == 1, (case.case_id, name)
        together = recorded["together"]
        assert (together["scheduled_to"] is None) != (together["message"] is None)
        if together["message"] is not None:
            assert available_of(together["message"]) == len(case.nodes), case.case_id
        elif together["scheduled_to"] is not None:
            assert recorded["per_node"][together["scheduled_to"]]["fits"], case.case_id


def _walk(value: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        yield value
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def test_the_corpus_covers_every_named_edge() -> None:
    """At least 220 cases, and each rule the engine must follow is met by some case."""
    assert len(CASES) >= 220
    operators: set[str] = set()
    effects: set[str] = set()
    field_operators: set[str] = set()
    resources: set[str] = set()
    seen: set[str] = set()
    for case in CASES:
        spec = case.pod["spec"]
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        terms = affinity.get("nodeSelectorTerms") or []
        for term in terms:
            operators.update(e["operator"] for e in term.get("matchExpressions") or [])
            field_operators.update(f["operator"] for f in term.get("matchFields") or [])
        if len(terms) > 1:
            seen.add("OR'ed terms")
        if any(len(t.get("matchExpressions") or []) > 1 for t in terms):
            seen.add("AND in a term")
        for node in case.nodes:
            effects.update(t["effect"] for t in node["spec"].get("taints") or [])
            resources.update(node["status"]["allocatable"])
            if node["spec"].get("unschedulable"):
                seen.add("cordoned")
            ready = node["status"]["conditions"][0]
            keys = {t["key"] for t in node["spec"].get("taints") or []}
            if ready["status"] != "True":
                seen.add("NotReady, tainted" if NOT_READY in keys else "NotReady, untainted")
            if "nvidia.com/gpu.health" in keys:
                seen.add("gfd's health taint")
            if int(node["status"]["allocatable"].get("pods", "0")) <= len(
                case.bound_on(node["metadata"]["name"])
            ):
                seen.add("too many pods")
        for toleration in spec.get("tolerations") or []:
            if toleration.get("operator") == "Exists" and "key" not in toleration:
                seen.add("tolerate everything")
            if "effect" not in toleration and "key" in toleration:
                seen.add("toleration without effect")
            if toleration.get("key") == UNSCHEDULABLE:
                seen.add("tolerating the cordon")
        if spec.get("initContainers"):
            seen.add("init containers")
        if any(c.get("restartPolicy") == "Always" for c in spec.get("initContainers") or []):
            seen.add("sidecars")
        if spec.get("runtimeClassName"):
            seen.add("RuntimeClass overhead")
        if spec.get("resources"):
            seen.add("pod-level resources")
        for item in _walk(spec.get("containers")):
            if "limits" in item and "requests" not in item:
                seen.add("limits only")
    assert operators >= {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
    assert field_operators >= {"In", "NotIn"}
    assert effects >= {"NoSchedule", "NoExecute", "PreferNoSchedule"}
    assert resources >= {
        "cpu", "memory", "pods", "nvidia.com/gpu", "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb",
    }  # fmt: skip
    assert seen >= {
        "OR'ed terms", "AND in a term", "cordoned", "NotReady, tainted", "NotReady, untainted",
        "gfd's health taint", "too many pods", "tolerate everything",
        "toleration without effect", "tolerating the cordon", "init containers", "sidecars",
        "RuntimeClass overhead", "pod-level resources", "limits only",
    }  # fmt: skip


def test_the_scheduler_s_message_is_read_as_a_count_per_reason() -> None:
    message = (
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient "
        "nvidia.com/mig-1g.10gb. no new claims to deallocate, preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling."
    )
    assert reason_histogram(message) == {
        "node(s) had untolerated taint(s)": 1,
        "Insufficient nvidia.com/mig-1g.10gb": 2,
    }
    assert available_of(message) == 3
    # A PreFilter's refusal names no count: it stands for every node.
    assert reason_histogram("0/2 nodes are available: pod affinity terms conflict. not found") == {
        "pod affinity terms conflict": 2
    }
    assert reason_histogram("0/1 nodes are available: 1 Too many pods.") == {"Too many pods": 1}
