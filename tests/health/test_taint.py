"""gfd's health taint (gfd.health.taint): the plan from a Node as read, and the writer
against the API server emulator: added while unhealthy, gone on recovery, an Event each
time, no request in a steady state, another writer's taints and an admin's taint under
gfd's key left alone, a lost race re-planned, a refusal reported once."""

from __future__ import annotations

import copy
import itertools
import threading
from typing import Any

import pytest

from gfd.health.condition import EVENT_NAMESPACE, HealthState
from gfd.health.taint import (
    TAINT_ADDED,
    TAINT_CHANGED,
    TAINT_KEY,
    TAINT_OWNERSHIP_ANNOTATION,
    TAINT_REMOVED,
    HealthOutputs,
    NodeTaintWriter,
    Taint,
    owned_effect,
    plan_taint,
    wanted_taint,
)
from gfd.kube_api import KubeClient
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator, Fault
from tests.kube_fixtures import NODE

LOST = HealthState(
    False, "GPULost", "GPU 7 (0000:df:00.0) is on the PCI bus but NVML does not see it"
)
XID = HealthState(
    False, "AllocatableMismatch", "the kubelet advertises 7 nvidia.com/gpu, expected 8"
)
HEALTHY = HealthState(True, "GPUsHealthy", "every GPU health check passes (gpu-lost)")
#: Taints other writers keep on a GPU node.
FOREIGN = [
    {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "training", "effect": "NoExecute"},
]
RECORD = f"{TAINT_KEY}:NoSchedule"


def gfd_taint(value: str = "GPULost", effect: str = "NoSchedule") -> dict[str, str]:
    return {"key": TAINT_KEY, "value": value, "effect": effect}


def node_with(
    taints: list[dict[str, str]] | None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    node: dict[str, Any] = {"metadata": {"name": NODE, "resourceVersion": "7"}, "spec": {}}
    if taints is not None:
        node["spec"]["taints"] = copy.deepcopy(taints)
    if annotations is not None:
        node["metadata"]["annotations"] = dict(annotations)
    return node


# ---------------------------------------------------------------- the plan (pure)


def test_the_wanted_taint_follows_the_state_and_the_option() -> None:
    assert wanted_taint(LOST, "NoSchedule") == Taint(TAINT_KEY, "GPULost", "NoSchedule")
    assert wanted_taint(LOST, "NoExecute") == Taint(TAINT_KEY, "GPULost", "NoExecute")
    assert wanted_taint(HEALTHY, "NoSchedule") is None
    assert wanted_taint(LOST, None) is None
    assert str(wanted_taint(LOST, "NoSchedule")) == "nvidia.com/gpu.health=GPULost:NoSchedule"


@pytest.mark.parametrize(
    ("record", "effect"),
    [
        (RECORD, "NoSchedule"),
        (f"{TAINT_KEY}:NoExecute", "NoExecute"),
        (f"{TAINT_KEY}:PreferNoSchedule", None),
        ("node.kubernetes.io/unschedulable:NoSchedule", None),
        ("NoSchedule", None),
        ("", None),
    ],
)
def test_only_a_record_of_gfds_own_key_and_effects_is_ownership(
    record: str, effect: str | None
) -> None:
    # Anyone able to edit the annotation could otherwise make gfd remove any taint.
    assert owned_effect({TAINT_OWNERSHIP_ANNOTATION: record}) == effect


def test_adding_appends_to_the_taints_as_read_and_tests_them() -> None:
    node = node_with(FOREIGN, {"other": "x"})
    plan = plan_taint(node, wanted_taint(LOST, "NoSchedule"))
    assert plan.change == "added"
    assert plan.taints == [*FOREIGN, gfd_taint()]
    assert plan.operations() == [
        {"op": "test", "path": "/spec/taints", "value": FOREIGN},
        {"op": "test", "path": "/metadata/annotations/nvidia.com~1gfd.taints", "value": None},
        {"op": "add", "path": "/spec/taints", "value": [*FOREIGN, gfd_taint()]},
        {"op": "add", "path": "/metadata/annotations/nvidia.com~1gfd.taints", "value": RECORD},
    ]


def test_a_node_without_taints_or_annotations_gets_both_whole() -> None:
    plan = plan_taint(node_with(None), wanted_taint(LOST, "NoSchedule"))
    assert plan.operations() == [
        # A null test matches an absent member (kube-apiserver's JSON Patch library).
        {"op": "test", "path": "/spec/taints", "value": None},
        {"op": "test", "path": "/metadata/annotations", "value": None},
        {"op": "add", "path": "/spec/taints", "value": [gfd_taint()]},
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {TAINT_OWNERSHIP_ANNOTATION: RECORD},
        },
    ]


def test_a_new_reason_or_effect_changes_gfds_entry_in_place() -> None:
    node = node_with([FOREIGN[0], gfd_taint(), FOREIGN[1]], {TAINT_OWNERSHIP_ANNOTATION: RECORD})
    reworded = plan_taint(node, wanted_taint(XID, "NoSchedule"))
    assert reworded.change == "changed"
    assert reworded.taints == [FOREIGN[0], gfd_taint("AllocatableMismatch"), FOREIGN[1]]
    assert reworded.before == Taint(TAINT_KEY, "GPULost", "NoSchedule")
    harsher = plan_taint(node, wanted_taint(LOST, "NoExecute"))
    assert harsher.taints == [FOREIGN[0], gfd_taint(effect="NoExecute"), FOREIGN[1]]
    assert harsher.record == f"{TAINT_KEY}:NoExecute"


def test_recovery_removes_gfds_entry_and_its_record_only() -> None:
    node = node_with([*FOREIGN, gfd_taint()], {TAINT_OWNERSHIP_ANNOTATION: RECORD})
    plan = plan_taint(node, None)
    assert (plan.change, plan.taints, plan.record) == ("removed", FOREIGN, None)
    assert plan.operations()[-1] == {
        "op": "remove",
        "path": "/metadata/annotations/nvidia.com~1gfd.taints",
    }
    alone = plan_taint(node_with([gfd_taint()], {TAINT_OWNERSHIP_ANNOTATION: RECORD}), None)
    assert {"op": "remove", "path": "/spec/taints"} in alone.operations()


def test_nothing_to_do_when_the_node_matches() -> None:
    tainted = node_with([*FOREIGN, gfd_taint()], {TAINT_OWNERSHIP_ANNOTATION: RECORD})
    assert plan_taint(tainted, wanted_taint(LOST, "NoSchedule")).change is None
    assert plan_taint(node_with(FOREIGN), None).change is None
    assert plan_taint(node_with(None), None).change is None


@pytest.mark.parametrize(
    "record",
    [None, "nvidia.com/gpu.health:NoExecute", "kubernetes.io/x:NoSchedule"],
    ids=["no-record", "record-of-another-effect", "forged-record"],
)
def test_a_taint_under_gfds_key_it_did_not_add_is_left_alone(record: str | None) -> None:
    admins = {"key": TAINT_KEY, "value": "maintenance", "effect": "NoSchedule"}
    node = node_with([admins], {TAINT_OWNERSHIP_ANNOTATION: record} if record else {})
    for wanted in (wanted_taint(LOST, "NoSchedule"), wanted_taint(LOST, "NoExecute"), None):
        plan = plan_taint(node, wanted)
        assert plan.change is None and plan.foreign == Taint(TAINT_KEY, "maintenance", "NoSchedule")


def test_a_record_whose_taint_is_gone_is_dropped() -> None:
    plan = plan_taint(node_with(FOREIGN, {TAINT_OWNERSHIP_ANNOTATION: RECORD}), None)
    assert plan.change == "disowned"
    # The taints are not rewritten: only the record goes.
    assert [op["op"] for op in plan.operations()] == ["test", "test", "remove"]


def test_an_odd_record_is_guarded_by_the_resource_version() -> None:
    # A value a test cannot compare byte for byte with the server's encoding.
    node = node_with(None, {TAINT_OWNERSHIP_ANNOTATION: "<edited>"})
    plan = plan_taint(node, wanted_taint(LOST, "NoSchedule"))
    assert {"op": "test", "path": "/metadata/resourceVersion", "value": "7"} in plan.operations()
    # A 422 then is a refusal only if the node has not changed at all since the read.
    assert plan.still_holds(node)
    newer = copy.deepcopy(node)
    newer["metadata"]["resourceVersion"] = "8"
    assert not plan.still_holds(newer)


# ---------------------------------------------------------------- the writer, against the API


#: One wall clock for every writer of a test module: Events are named by the time.
_TICKS = itertools.count(1.5e9, 1.0)


def tick() -> float:
    return next(_TICKS)


class Cycle:
    """One agent cycle as the taint sees it: the node sink's read, then the state."""

    def __init__(
        self, client: KubeClient, stop: threading.Event, effect: str | None = "NoSchedule"
    ) -> None:
        self.sink = NodeSink(client=client, node_name=NODE, stop=stop)
        self.writer = NodeTaintWriter(
            client=client, node_sink=self.sink, stop=stop, effect=effect, wall_clock=tick
        )

    def __call__(self, state: HealthState) -> None:
        self.writer.saw(self.sink.read_ahead())
        self.writer.write(state, None)


def set_taints(emulator: ApiServerEmulator, taints: list[dict[str, str]]) -> None:
    def change(node: dict[str, Any]) -> None:
        node["spec"]["taints"] = copy.deepcopy(taints)

    emulator.edit_object("nodes", NODE, mutate=change)


def taints(emulator: ApiServerEmulator) -> list[dict[str, str]]:
    return list(emulator.node(NODE)["spec"].get("taints") or [])


def taint_events(emulator: ApiServerEmulator) -> list[tuple[str, str, str]]:
    return [(e["reason"], e["type"], e["message"]) for e in emulator.events(EVENT_NAMESPACE)]


def test_the_taint_is_added_while_unhealthy_and_removed_on_recovery(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    set_taints(emulator, FOREIGN)
    cycle = Cycle(client, stop)
    cycle(HEALTHY)
    assert emulator.count(writes=True) == 0
    cycle(LOST)
    assert taints(emulator) == [*FOREIGN, gfd_taint()]
    assert emulator.node_annotations(NODE)[TAINT_OWNERSHIP_ANNOTATION] == RECORD
    added = f"gfd tainted the node {TAINT_KEY}=GPULost:NoSchedule: {LOST.message}"
    assert taint_events(emulator) == [(TAINT_ADDED, "Warning", added)]
    event = emulator.events(EVENT_NAMESPACE)[0]
    assert event["involvedObject"]["name"] == NODE and event["metadata"]["name"].startswith(
        f"{NODE}."
    )

    # A steady state, unhealthy or healthy, costs no request but the cycle's read.
    emulator.clear_log()
    cycle(LOST)
    assert emulator.count(writes=True) == 0 and emulator.count(method="GET") == 1

    cycle(HEALTHY)
    assert taints(emulator) == FOREIGN
    assert TAINT_OWNERSHIP_ANNOTATION not in emulator.node_annotations(NODE)
    removed = f"gfd removed its taint {TAINT_KEY}=GPULost:NoSchedule: {HEALTHY.message}"
    assert taint_events(emulator)[-1] == (TAINT_REMOVED, "Normal", removed)
    emulator.clear_log()
    cycle(HEALTHY)
    assert emulator.count(writes=True) == 0


def test_a_new_reason_and_a_new_effect_change_the_taint(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    cycle = Cycle(client, stop)
    cycle(LOST)
    cycle(XID)
    assert taints(emulator) == [gfd_taint("AllocatableMismatch")]
    assert taint_events(emulator)[-1][:2] == (TAINT_CHANGED, "Warning")
    assert "(was nvidia.com/gpu.health=GPULost:NoSchedule)" in taint_events(emulator)[-1][2]
    # A reload to NoExecute: the same entry, the new effect, the record follows.
    Cycle(client, stop, effect="NoExecute")(XID)
    assert taints(emulator) == [gfd_taint("AllocatableMismatch", "NoExecute")]
    assert emulator.node_annotations(NODE)[TAINT_OWNERSHIP_ANNOTATION] == f"{TAINT_KEY}:NoExecute"


def test_turning_the_option_off_removes_gfds_taint(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    Cycle(client, stop)(LOST)
    off = Cycle(client, stop, effect=None)
    off(LOST)
    assert taints(emulator) == []
    assert [e[0] for e in taint_events(emulator)] == [TAINT_ADDED, TAINT_REMOVED]
    emulator.clear_log()
    off(LOST)
    assert emulator.count(writes=True) == 0


def test_an_admins_taint_under_gfds_key_is_left_alone(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    admins = {"key": TAINT_KEY, "value": "maintenance", "effect": "NoSchedule"}
    set_taints(emulator, [admins])
    cycle = Cycle(client, stop)
    for state in (LOST, HEALTHY, LOST):
        cycle(state)
    assert emulator.count(writes=True) == 0
    assert taints(emulator) == [admins]


def test_a_taint_whose_record_an_admin_removed_is_no_longer_gfds(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    cycle = Cycle(client, stop)
    cycle(LOST)
    emulator.change_node_metadata(NODE, annotations={TAINT_OWNERSHIP_ANNOTATION: None})
    emulator.clear_log()
    cycle(HEALTHY)
    assert emulator.count(writes=True) == 0
    assert taints(emulator) == [gfd_taint()]


def test_a_record_whose_taint_an_admin_removed_is_dropped_without_an_event(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    cycle = Cycle(client, stop)
    cycle(LOST)
    set_taints(emulator, [])
    cycle(HEALTHY)
    assert TAINT_OWNERSHIP_ANNOTATION not in emulator.node_annotations(NODE)
    assert [e[0] for e in taint_events(emulator)] == [TAINT_ADDED]


def test_a_taint_another_writer_adds_meanwhile_survives_gfds_write(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    set_taints(emulator, FOREIGN)
    cycle = Cycle(client, stop)
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    # Between gfd's read and its write, the node is cordoned.
    emulator.before(lambda api: set_taints(api, [*FOREIGN, cordon]), method="PATCH")
    cycle(LOST)
    patches = [r.status for r in emulator.requests if r.method == "PATCH"]
    assert patches == [422, 200]
    assert taints(emulator) == [*FOREIGN, cordon, gfd_taint()]
    assert [e[0] for e in taint_events(emulator)] == [TAINT_ADDED]


def test_a_refused_change_is_reported_not_repeated_within_the_cycle(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # The server refuses the patch though everything it tests holds (an admission policy).
    emulator.inject(Fault(status=422, method="PATCH", times=None))
    cycle = Cycle(client, stop)
    cycle(LOST)
    assert [r.status for r in emulator.requests if r.method == "PATCH"] == [422]
    assert taints(emulator) == [] and taint_events(emulator) == []
    # The next cycle tries again (the node still differs).
    emulator.clear_faults()
    cycle(LOST)
    assert taints(emulator) == [gfd_taint()]


def test_outputs_hand_the_state_to_each_writer_in_turn() -> None:
    seen: list[tuple[str, Any]] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name = name

        def saw(self, node: Any) -> None:
            seen.append((self.name, node))

        def write(self, state: HealthState, transition: Any) -> None:
            seen.append((self.name, state))

    outputs = HealthOutputs([Recorder("condition"), Recorder("taint")])
    outputs.saw({"n": 1})
    outputs.write(LOST, None)
    assert seen == [
        ("condition", {"n": 1}),
        ("taint", {"n": 1}),
        ("condition", LOST),
        ("taint", LOST),
    ]


def test_an_effect_the_taint_cannot_have_is_refused(
    client: KubeClient, stop: threading.Event
) -> None:
    sink = NodeSink(client=client, node_name=NODE, stop=stop)
    with pytest.raises(ValueError, match="NoSchedule, NoExecute"):
        NodeTaintWriter(client=client, node_sink=sink, stop=stop, effect="PreferNoSchedule")


def test_a_writer_that_never_saw_the_node_reads_it_only_to_taint(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # A process whose first GPU read failed has no Node from the node sink.
    writer = Cycle(client, stop).writer
    writer.write(HEALTHY, None)
    assert emulator.requests == []
    writer.write(LOST, None)
    assert [(r.method, r.status) for r in emulator.requests] == [
        ("GET", 200),
        ("PATCH", 200),
        ("POST", 201),  # the taint's Event
    ]
    assert taints(emulator) == [gfd_taint()]
