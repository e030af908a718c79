"""The ``GPUHealthy`` condition (gfd.health.condition): the state a verdict decides, the state
read back from a Node, which changes are worth an Event, and the bodies the writer sends.

The writer against real API servers is ``tests/kube/test_condition_writer.py`` (both the
emulator and kmock, through that directory's fixtures) and, in a cluster, ``tests/realkube``.
"""

from __future__ import annotations

from typing import Any

from gfd.health import CONDITION_TYPE, FAILING, OK, REASONS, HealthState, Transition
from gfd.health.check import CheckResult, Problem, Verdict
from gfd.health.condition import (
    condition_patch,
    condition_removal,
    event_body,
    node_condition,
    state_from_condition,
    state_of,
)


def test_only_changes_that_matter_are_events() -> None:
    healthy = HealthState(True, "GPUsHealthy", "every GPU health check passes (gpu-lost)")
    reworded = HealthState(True, "GPUsHealthy", "every GPU health check passes (nvlink)")
    lost = HealthState(False, "GPULost", "GPU 7 (0000:22:00.0) is lost")
    two_lost = HealthState(False, "GPULost", "GPU 6 (0000:21:00.0) is lost; GPU 7 ...")
    assert not Transition(None, healthy).worth_an_event
    assert Transition(None, lost).worth_an_event
    assert Transition(healthy, lost).worth_an_event
    assert Transition(lost, two_lost).worth_an_event
    assert Transition(lost, healthy).worth_an_event
    assert not Transition(healthy, reworded).worth_an_event


LOST = HealthState(False, "GPULost", "GPU 7 (0000:22:00.0) is lost", frozenset({"gpu-lost"}))


def test_a_verdict_ranks_its_problems_by_the_priority_and_an_unranked_reason_last() -> None:
    verdict = Verdict(
        (
            CheckResult("nvlink", FAILING, (Problem("nvlink", "NVLinkDegraded", "link down"),)),
            CheckResult("xid", FAILING, (Problem("xid", "NotRanked", "xid 79"),)),
            CheckResult("gpu-lost", FAILING, (Problem("gpu-lost", "GPULost", "GPU 7 lost"),)),
        )
    )
    state = state_of(verdict, REASONS)
    assert state is not None
    assert (state.reason, state.message) == ("GPULost", "GPU 7 lost; link down; xid 79")
    assert state.failing_checks == {"nvlink", "xid", "gpu-lost"}


def test_a_verdict_where_every_check_passes_names_them() -> None:
    verdict = Verdict((CheckResult("gpu-lost", OK), CheckResult("nvlink", OK)))
    assert state_of(verdict, REASONS) == HealthState(
        True, "GPUsHealthy", "every GPU health check passes (gpu-lost, nvlink)"
    )


def node_with(*conditions: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "status": {"conditions": list(conditions)}}


def test_gfds_condition_is_found_by_type_among_the_kubelets() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    ours = {"type": CONDITION_TYPE, "status": "False", "reason": "GPULost"}
    assert node_condition(node_with(ready, "junk", ours)) == ours
    assert node_condition(node_with(ready)) is None
    assert node_condition({"status": {"conditions": "not a list"}}) is None
    # A message missing reads as empty; the failing checks are not on the Node.
    assert state_from_condition(ours) == HealthState(False, "GPULost", "")


def test_a_condition_gfd_could_not_have_written_is_not_adopted() -> None:
    assert (
        state_from_condition({"type": CONDITION_TYPE, "status": "Unknown", "reason": "R"}) is None
    )
    assert state_from_condition({"type": CONDITION_TYPE, "status": "True", "reason": 3}) is None
    assert state_from_condition(None) is None


def test_the_patch_holds_gfds_condition_alone() -> None:
    patch = condition_patch(LOST, heartbeat="2026-01-01T00:00:10Z", transition_time="t0")
    assert patch == {
        "status": {
            "conditions": [
                {
                    "type": CONDITION_TYPE,
                    "status": "False",
                    "reason": "GPULost",
                    "message": LOST.message,
                    "lastHeartbeatTime": "2026-01-01T00:00:10Z",
                    "lastTransitionTime": "t0",
                }
            ]
        }
    }


def test_a_recovery_event_says_what_it_recovered_from() -> None:
    healthy = HealthState(True, "GPUsHealthy", "every GPU health check passes (gpu-lost)")
    body = event_body(
        Transition(LOST, healthy), node=None, node_name="gpu-node-1", now=1_767_225_600.5
    )
    assert (body["type"], body["reason"]) == ("Normal", "GPUsHealthy")
    assert body["message"] == "every GPU health check passes (gpu-lost) (was GPULost)"
    assert body["metadata"] == {"name": "gpu-node-1.188672520bc76500", "namespace": "default"}
    # No Node read yet: the Event names the Node without its uid.
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-01-01T00:00:00Z"


def test_the_condition_s_removal_tests_its_position_and_type() -> None:
    ready = {"type": "Ready", "status": "True"}
    mine = {"type": CONDITION_TYPE, "status": "False", "reason": "GPULost"}
    node = {"status": {"conditions": [ready, {"type": "DiskPressure"}, mine]}}
    assert condition_removal(node) == [
        {"op": "test", "path": "/status/conditions/2/type", "value": CONDITION_TYPE},
        {"op": "remove", "path": "/status/conditions/2"},
    ]
    assert condition_removal({"status": {"conditions": [ready]}}) is None
    assert condition_removal({"status": {}}) is None
    assert condition_removal({}) is None
