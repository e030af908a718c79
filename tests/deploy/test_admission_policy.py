"""The ValidatingAdmissionPolicies of deploy/: their CEL (run by cel-python) and a plain
Python statement of their intent agree, on chosen cases, on generated ones, and on
the requests gfd's real sinks send to the API server emulator. The node sink has three:
labels, annotations and gfd's health taint (gfd-node-labeler), the GPUHealthy condition
(gfd-node-health) and events about the node (gfd-node-events)."""

from __future__ import annotations

import copy
import importlib.resources
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from tests.deploy.admission_model import (
    EVENTS_IDENTITY,
    EVENTS_NAMESPACE,
    EVENTS_OPERATION,
    EVENTS_OWN_NODE,
    EVENTS_POD_BOUND,
    HEALTH_CONDITION_SHAPE,
    HEALTH_FOREIGN_CONDITIONS,
    HEALTH_METADATA,
    HEALTH_OWN,
    HEALTH_POD_BOUND,
    HEALTH_REASONS,
    HEALTH_STATUS_FIELDS,
    HEALTH_TAINT_KEY,
    NODE_ANNOTATIONS,
    NODE_FOREIGN_TAINTS,
    NODE_LABELS,
    NODE_MANAGED_FIELDS,
    NODE_NAME_CLAIM,
    NODE_OPERATION,
    NODE_OPERATOR,
    NODE_OTHER_FIELDS,
    NODE_OWN,
    NODE_POD_BOUND,
    NODE_SPEC_FIELDS,
    NODE_STATUS_FIELDS,
    NODE_TAINT_SHAPE,
    NODEFEATURE_FEATURES,
    NODEFEATURE_IDENTITY,
    NODEFEATURE_LABELS,
    NODEFEATURE_POD_BOUND,
    AdmissionRequest,
    CelPolicy,
    Verdict,
    node_events_policy_intent,
    node_feature_policy_intent,
    node_health_policy_intent,
    node_policy_intent,
    pod_bound_claims,
    service_account_user,
)
from tests.deploy.manifests import NAMESPACE, one, render

GFD = service_account_user(NAMESPACE)


@pytest.fixture(scope="module")
def node_policy() -> CelPolicy:
    return CelPolicy(one(render("standalone"), "ValidatingAdmissionPolicy", "gfd-node-labeler"))


@pytest.fixture(scope="module")
def nodefeature_policy() -> CelPolicy:
    policy = one(render("node-feature-api"), "ValidatingAdmissionPolicy", "gfd-node-feature-writer")
    return CelPolicy(policy)


def node(name: str = "gpu-1", labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": dict(labels if labels is not None else {"kubernetes.io/hostname": name}),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.0.1.0/24"},
    }
    for key, value in extra.items():
        obj["metadata"][key] = value
    return obj


def update(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    claim: str | None = "gpu-1",
    user: str = GFD,
    node_bound: bool = False,
) -> AdmissionRequest:
    """An update by ``user`` with a token bound to a Pod on node ``claim`` (None: no
    claims at all; ``node_bound``: a token bound to the Node itself)."""
    if claim is None:
        extra: dict[str, list[str]] = {}
    elif node_bound:
        extra = {NODE_NAME_CLAIM: [claim], "authentication.kubernetes.io/node-uid": ["1"]}
    else:
        extra = pod_bound_claims(claim)
    return AdmissionRequest("UPDATE", "", "nodes", user, new, old, extra)


INTENTS = {
    "gfd-node-labeler": node_policy_intent,
    "gfd-node-health": node_health_policy_intent,
    "gfd-node-events": node_events_policy_intent,
    "gfd-node-feature-writer": node_feature_policy_intent,
}


def both(policy: CelPolicy, request: AdmissionRequest) -> Verdict:
    """The CEL verdict, after checking that the Python intent says the same."""
    cel = policy.evaluate(request)
    intent = INTENTS[policy.name](request, namespace=NAMESPACE)
    exact = {"nodes": "UPDATE", "events": "CREATE"}.get(request.resource, request.operation)
    if request.operation == exact:
        assert cel == intent
    else:
        # CREATE/DELETE of a node, UPDATE/DELETE of an event: both deny; CEL also
        # reports the rules that could not be evaluated without an old or new object.
        assert (cel.applies, cel.allowed) == (intent.applies, intent.allowed)
    return cel


def with_labels(obj: dict[str, Any], changes: dict[str, str | None]) -> dict[str, Any]:
    """A copy of ``obj`` with labels set (a value) or removed (None)."""
    changed = copy.deepcopy(obj)
    labels = changed["metadata"].setdefault("labels", {})
    for key, value in changes.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return changed


def test_gfd_may_set_change_and_remove_its_labels(node_policy: CelPolicy) -> None:
    old = with_labels(node(), {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "hopper"})
    new = with_labels(
        old,
        {
            "nvidia.com/gpu.count": "4",
            "nvidia.com/gpu.family": None,
            "nvidia.com/mig.capable": "true",
        },
    )
    new["metadata"]["annotations"]["nvidia.com/gfd.labels"] = "gpu.count,mig.capable"
    assert both(node_policy, update(old, new)) == Verdict(True)


@pytest.mark.parametrize(
    ("claim", "node_bound", "denials"),
    [
        ("gpu-2", False, (NODE_OWN,)),
        (None, False, (NODE_POD_BOUND, NODE_OWN)),
        ("gpu-1", True, (NODE_POD_BOUND,)),
    ],
    ids=["another-node", "token-without-claims", "node-bound-token"],
)
def test_gfd_may_change_only_its_own_node_with_a_pod_bound_token(
    node_policy: CelPolicy, claim: str | None, node_bound: bool, denials: tuple[str, ...]
) -> None:
    old = node()
    new = with_labels(old, {"nvidia.com/gpu.count": "8"})
    verdict = both(node_policy, update(old, new, claim=claim, node_bound=node_bound))
    assert verdict.denials == denials
    if claim == "gpu-2":
        assert verdict.details == ("gfd running on node gpu-2 may not change node gpu-1",)


@pytest.mark.parametrize(
    "key",
    [
        "nvidia.com/gpu.deploy.driver",
        "nvidia.com/gpu.deploy.mig-manager",
        "nvidia.com/mig.config",
        "nvidia.com/mig.config.state",
        "nvidia.com/device-plugin.config",
        "nvidia.com/gpu.present",
    ],
)
@pytest.mark.parametrize("value", ["false", None], ids=["set", "remove"])
def test_gpu_operator_control_labels_are_out_of_bounds(
    node_policy: CelPolicy, key: str, value: str | None
) -> None:
    old = with_labels(node(), {key: "true"})
    verdict = both(node_policy, update(old, with_labels(old, {key: value})))
    assert verdict.denials == (NODE_OPERATOR,)
    assert verdict.details == (f"{NODE_OPERATOR} ({key})",)


@pytest.mark.parametrize(
    ("change", "denial"),
    [
        ({"kubernetes.io/hostname": "spoofed"}, NODE_LABELS),
        ({"node-role.kubernetes.io/control-plane": ""}, NODE_LABELS),
        ({"feature.node.kubernetes.io/pci-10de.present": "true"}, NODE_LABELS),
        ({"nvidia.com.evil/gpu": "1"}, NODE_LABELS),
        ({"mig.nvidia.com/x": "1"}, NODE_LABELS),
        ({"kubernetes.io/hostname": None}, NODE_LABELS),
    ],
)
def test_other_label_keys_are_out_of_bounds(
    node_policy: CelPolicy, change: dict[str, str | None], denial: str
) -> None:
    old = node()
    new = with_labels(old, change)
    assert both(node_policy, update(old, new)).denials == (denial,)


def test_other_annotations_spec_and_finalizers_are_out_of_bounds(node_policy: CelPolicy) -> None:
    old = node()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "30"
    assert both(node_policy, update(old, new)).denials == (NODE_ANNOTATIONS,)
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["nvidia.com/gpu-driver-upgrade-state"] = "upgrade-done"
    assert both(node_policy, update(old, new)).denials == (NODE_ANNOTATIONS,)
    new = copy.deepcopy(old)
    new["spec"]["unschedulable"] = True
    assert both(node_policy, update(old, new)).denials == (NODE_OTHER_FIELDS,)
    new = copy.deepcopy(old)
    new["spec"]["taints"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert both(node_policy, update(old, new)).denials == (NODE_FOREIGN_TAINTS,)
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["nvidia.com/keep"]
    assert both(node_policy, update(old, new)).denials == (NODE_OTHER_FIELDS,)


def test_other_managers_managed_fields_are_out_of_bounds(node_policy: CelPolicy) -> None:
    entry = {"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}
    old = node(managedFields=[entry, {"manager": "gfd", "operation": "Update"}])
    mine = copy.deepcopy(old)
    mine["metadata"]["managedFields"][1]["time"] = "2026-01-01T00:00:00Z"
    assert both(node_policy, update(old, mine)) == Verdict(True)
    for forged in ([], [{**entry, "manager": "gfd"}], [entry, {**entry, "manager": "x"}]):
        new = copy.deepcopy(old)
        new["metadata"]["managedFields"] = forged
        assert both(node_policy, update(old, new)).denials == (NODE_MANAGED_FIELDS,)
    # An entry that owned only nvidia.com/ labels goes when gfd takes over its last one
    # (the server drops empty entries): allowed. One that owned more must stay.
    hand_set = {
        "manager": "kubectl-label",
        "operation": "Update",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}},
    }
    broader = {
        **hand_set,
        "fieldsV1": {"f:metadata": {"f:labels": {"f:example.com/team": {}}}},
    }
    for dropped, denials in ((hand_set, ()), (broader, (NODE_MANAGED_FIELDS,))):
        before = node(managedFields=[entry, dropped])
        after = node(managedFields=[entry])
        assert both(node_policy, update(before, after)).denials == denials


# ---------------------------------------------------------------- node taints


def taint(
    key: str = HEALTH_TAINT_KEY, value: str | None = "XidError", effect: str = "NoSchedule"
) -> dict[str, str]:
    """A taint as the API server stores it (no value: left out)."""
    entry = {"key": key, "effect": effect}
    if value is not None:
        entry["value"] = value
    return entry


#: Taints other writers put on a GPU node: the GPU Operator's convention, cordoning, and
#: the node lifecycle controller's.
FOREIGN = [
    taint("nvidia.com/gpu", None),
    taint("node.kubernetes.io/unschedulable", None),
    taint("node.kubernetes.io/not-ready", None, "NoExecute"),
]


def with_taints(obj: dict[str, Any], taints: list[dict[str, str]] | None) -> dict[str, Any]:
    """A copy of ``obj`` with ``spec.taints`` set (None: absent)."""
    changed = copy.deepcopy(obj)
    if taints is None:
        changed["spec"].pop("taints", None)
    else:
        changed["spec"]["taints"] = copy.deepcopy(taints)
    return changed


def owned(obj: dict[str, Any], record: str | None) -> dict[str, Any]:
    """A copy of ``obj`` whose taint ownership annotation is ``record`` (None: absent)."""
    changed = copy.deepcopy(obj)
    annotations = changed["metadata"]["annotations"]
    if record is None:
        annotations.pop("nvidia.com/gfd.taints", None)
    else:
        annotations["nvidia.com/gfd.taints"] = record
    return changed


@pytest.mark.parametrize("before", [None, [], FOREIGN], ids=["no-taints", "empty", "foreign"])
def test_gfd_may_add_change_and_remove_its_taint(
    node_policy: CelPolicy, before: list[dict[str, str]] | None
) -> None:
    # The whole life of gfd's taint, beside whatever taints others set: added with its
    # ownership record, its reason changed, its effect changed, removed.
    clean = with_taints(node(), before)
    others = list(before or [])
    added = owned(with_taints(clean, [*others, taint()]), "nvidia.com/gpu.health:NoSchedule")
    reworded = with_taints(added, [*others, taint(value="GPULost")])
    # A strategic merge or JSON patch may put gfd's entry anywhere among the others.
    moved = with_taints(added, [taint(value="GPULost"), *others])
    harsher = owned(
        with_taints(added, [*others, taint(value="GPULost", effect="NoExecute")]),
        "nvidia.com/gpu.health:NoExecute",
    )
    removed = owned(with_taints(harsher, others if before is not None else None), None)
    steps = [(clean, added), (added, reworded), (added, moved), (reworded, harsher)]
    steps.append((harsher, removed))
    for old, new in steps:
        assert both(node_policy, update(old, new)) == Verdict(True), new["spec"]


def test_labels_and_the_taint_change_together(node_policy: CelPolicy) -> None:
    # The label rules are unaffected by a taint in the same request, either way.
    old = with_taints(node(), FOREIGN)
    new = with_labels(with_taints(old, [*FOREIGN, taint()]), {"nvidia.com/gpu.count": "8"})
    assert both(node_policy, update(old, new)) == Verdict(True)
    bad_label = with_labels(new, {"kubernetes.io/hostname": "spoofed"})
    assert both(node_policy, update(old, bad_label)).denials == (NODE_LABELS,)
    operator = with_labels(new, {"nvidia.com/mig.config": "all-1g.10gb"})
    assert both(node_policy, update(old, operator)).denials == (NODE_OPERATOR,)


@pytest.mark.parametrize(
    "after",
    [
        [*FOREIGN, taint("example.com/maintenance", "true")],
        FOREIGN[1:],
        [taint("nvidia.com/gpu", "present"), *FOREIGN[1:]],
        [taint("nvidia.com/gpu", None, "NoExecute"), *FOREIGN[1:]],
        [FOREIGN[1], FOREIGN[0], FOREIGN[2]],
        [],
    ],
    ids=["added", "removed", "value-changed", "effect-changed", "reordered", "all-removed"],
)
def test_a_foreign_taint_is_refused(node_policy: CelPolicy, after: list[dict[str, str]]) -> None:
    old = with_taints(node(), FOREIGN)
    verdict = both(node_policy, update(old, with_taints(old, after)))
    assert verdict.denials == (NODE_FOREIGN_TAINTS,)
    # Nor does changing gfd's own taint in the same request make it pass.
    mine = with_taints(old, [*after, taint()])
    assert both(node_policy, update(old, mine)).denials == (NODE_FOREIGN_TAINTS,)


@pytest.mark.parametrize(
    "key",
    ["nvidia.com/gpu", "nvidia.com/gpu.health.x", "nvidia.com/gpu.healthy", "gpu.health"],
)
def test_any_other_taint_key_is_refused(node_policy: CelPolicy, key: str) -> None:
    # gfd's key exactly: a taint under any other key, nvidia.com/ ones included, is
    # somebody else's.
    old = node()
    new = owned(with_taints(old, [taint(key)]), f"{key}:NoSchedule")
    assert both(node_policy, update(old, new)).denials == (NODE_FOREIGN_TAINTS,)


def test_another_nodes_taints_are_refused(node_policy: CelPolicy) -> None:
    old = with_taints(node("gpu-1"), FOREIGN)
    for after in ([*FOREIGN, taint()], FOREIGN[1:]):
        verdict = both(node_policy, update(old, with_taints(old, after), claim="gpu-2"))
        assert NODE_OWN in verdict.denials
    # gfd's own taint on another node is refused like any other change there.
    theirs = with_taints(old, [*FOREIGN, taint()])
    verdict = both(node_policy, update(theirs, with_taints(theirs, FOREIGN), claim="gpu-2"))
    assert verdict.denials == (NODE_OWN,)


@pytest.mark.parametrize(
    "mine",
    [
        [taint(effect="PreferNoSchedule")],
        [taint(), taint(effect="NoExecute")],
        [taint(), taint()],
        [{"key": HEALTH_TAINT_KEY, "value": "XidError"}],
    ],
    ids=["prefer-no-schedule", "two-effects", "twice", "no-effect"],
)
def test_gfd_taint_is_one_entry_that_keeps_pods_off(
    node_policy: CelPolicy, mine: list[dict[str, str]]
) -> None:
    old = with_taints(node(), FOREIGN)
    verdict = both(node_policy, update(old, with_taints(old, [*FOREIGN, *mine])))
    assert verdict.denials == (NODE_TAINT_SHAPE,)


def test_a_taint_with_gfds_key_set_by_an_admin_stays_acceptable(node_policy: CelPolicy) -> None:
    # An admin's taint under gfd's key, of any shape, does not block gfd's label writes:
    # the shape rule judges a change of those taints, not their presence.
    old = with_taints(node(), [taint(value="maintenance", effect="PreferNoSchedule")])
    new = with_labels(old, {"nvidia.com/gpu.count": "8"})
    assert both(node_policy, update(old, new)) == Verdict(True)


def _node_spec_properties(version: str) -> set[str]:
    schemas = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    text = (schemas / f"v{version}-local-strict" / "nodespec-v1.json").read_text()
    return set(json.loads(text)["properties"])


def test_node_spec_fields_are_every_field_but_taints() -> None:
    # The node policy names each NodeSpec field it holds unchanged: a field a new
    # Kubernetes adds would otherwise be open to gfd. Every schema from the floor (1.30)
    # to the newest kubernetes-validate knows is read.
    versions = [
        v
        for v in sorted(set(kubernetes_validate.utils.all_versions()), key=Version)
        if Version(v) >= Version("1.30")
    ]
    assert versions and Version(versions[-1]) >= Version("1.36"), versions
    fields: set[str] = set()
    for version in versions:
        fields |= _node_spec_properties(version)
    assert fields - {"taints"} == set(NODE_SPEC_FIELDS)


@pytest.mark.parametrize("field", NODE_SPEC_FIELDS)
def test_every_other_spec_field_is_refused(node_policy: CelPolicy, field: str) -> None:
    # Each field the list names is one the CEL really holds: set, changed and removed.
    value: Any = {
        "podCIDRs": ["10.0.1.0/24"],
        "unschedulable": True,
        "configSource": {"configMap": {"name": "kubelet", "namespace": "kube-system"}},
    }.get(field, "x")
    old = node()
    old["spec"].pop("podCIDR")
    new = copy.deepcopy(old)
    new["spec"][field] = value
    for before, after in ((old, new), (new, old)):
        assert both(node_policy, update(before, after)).denials == (NODE_OTHER_FIELDS,)


def test_create_and_delete_are_denied(node_policy: CelPolicy) -> None:
    claim = pod_bound_claims("gpu-1")
    create = AdmissionRequest("CREATE", "", "nodes", GFD, node(), None, claim)
    delete = AdmissionRequest("DELETE", "", "nodes", GFD, None, node(), claim)
    for request in (create, delete):
        verdict = both(node_policy, request)
        assert verdict.applies and NODE_OPERATION in verdict.denials


def test_other_users_are_not_affected(node_policy: CelPolicy) -> None:
    old = node()
    new = with_labels(old, {"kubernetes.io/hostname": "anything"})
    for user in ("system:node:gpu-1", "system:serviceaccount:other:gfd", "admin"):
        assert both(node_policy, update(old, new, claim=None, user=user)) == Verdict(False)


label_keys = st.sampled_from(
    [
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.product",
        "nvidia.com/gfd.labels",
        "nvidia.com/gpu.topology",
        "nvidia.com/mig.config",
        "nvidia.com/gpu.deploy.driver",
        "kubernetes.io/hostname",
        "feature.node.kubernetes.io/pci-10de.present",
        "nvidia.com.evil/x",
        "topology.kubernetes.io/zone",
    ]
)
#: Taints the generated updates draw from: gfd's in each shape, and others'.
TAINTS = [
    taint(),
    taint(value="GPULost"),
    taint(effect="NoExecute"),
    taint(effect="PreferNoSchedule"),
    *FOREIGN,
    taint("nvidia.com/gpu.healthy"),
]
label_maps = st.dictionaries(label_keys, st.sampled_from(["", "1", "8", "true"]), max_size=5)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    old_labels=label_maps,
    new_labels=label_maps,
    old_annotations=label_maps,
    new_annotations=label_maps,
    claim=st.sampled_from(["gpu-1", "gpu-2", None]),
    node_bound=st.booleans(),
    spec_changes=st.booleans(),
    old_taints=st.none() | st.lists(st.sampled_from(TAINTS), max_size=3),
    new_taints=st.none() | st.lists(st.sampled_from(TAINTS), max_size=3),
)
def test_cel_and_intent_agree_on_generated_updates(
    node_policy: CelPolicy,
    old_labels: dict[str, str],
    new_labels: dict[str, str],
    old_annotations: dict[str, str],
    new_annotations: dict[str, str],
    claim: str | None,
    node_bound: bool,
    spec_changes: bool,
    old_taints: list[dict[str, str]] | None,
    new_taints: list[dict[str, str]] | None,
) -> None:
    old = with_taints(node(labels=old_labels, annotations=old_annotations), old_taints)
    new = with_taints(node(labels=new_labels, annotations=new_annotations), new_taints)
    if not old_labels:
        del old["metadata"]["labels"]
    if spec_changes:
        new["spec"]["unschedulable"] = True
    both(node_policy, update(old, new, claim=claim, node_bound=node_bound))


def nodefeature(
    name: str,
    node_label: str | None,
    labels: dict[str, str],
    features: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if node_label is not None:
        metadata["labels"] = {"nfd.node.kubernetes.io/node-name": node_label}
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": metadata,
        "spec": {"labels": labels, "features": features or {}},
    }


@pytest.mark.parametrize(
    ("features", "denials"),
    [
        ({"flags": {}, "attributes": {}, "instances": {}}, ()),
        ({"flags": {"cpu.cpuid": {"elements": {"AVX512": {}}}}}, (NODEFEATURE_FEATURES,)),
        ({"attributes": {"kernel.version": {"elements": {"major": "6"}}}}, (NODEFEATURE_FEATURES,)),
    ],
)
def test_nodefeature_raw_features_are_out_of_bounds(
    nodefeature_policy: CelPolicy, features: dict[str, Any], denials: tuple[str, ...]
) -> None:
    obj = nodefeature("nvidia-features-for-gpu-1", "gpu-1", {}, features)
    request = AdmissionRequest(
        "CREATE", "nfd.k8s-sigs.io", "nodefeatures", GFD, obj, None, pod_bound_claims("gpu-1")
    )
    assert both(nodefeature_policy, request) == Verdict(True, denials)


def test_nodefeature_from_a_node_bound_token_is_denied(nodefeature_policy: CelPolicy) -> None:
    obj = nodefeature("nvidia-features-for-gpu-1", "gpu-1", {})
    request = AdmissionRequest(
        "CREATE", "nfd.k8s-sigs.io", "nodefeatures", GFD, obj, None, {NODE_NAME_CLAIM: ["gpu-1"]}
    )
    assert both(nodefeature_policy, request) == Verdict(True, (NODEFEATURE_POD_BOUND,))


@pytest.mark.parametrize(
    ("name", "node_label", "labels", "denials"),
    [
        ("nvidia-features-for-gpu-1", "gpu-1", {"nvidia.com/gpu.count": "8"}, ()),
        ("nvidia-features-for-gpu-2", "gpu-2", {}, (NODEFEATURE_IDENTITY,)),
        ("nvidia-features-for-gpu-1", "gpu-2", {}, (NODEFEATURE_IDENTITY,)),
        ("nvidia-features-for-gpu-1", None, {}, (NODEFEATURE_IDENTITY,)),
        ("something-else", "gpu-1", {}, (NODEFEATURE_IDENTITY,)),
        (
            "nvidia-features-for-gpu-1",
            "gpu-1",
            {"node-role.kubernetes.io/control-plane": ""},
            (NODEFEATURE_LABELS,),
        ),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_nodefeature_policy(
    nodefeature_policy: CelPolicy,
    operation: str,
    name: str,
    node_label: str | None,
    labels: dict[str, str],
    denials: tuple[str, ...],
) -> None:
    obj = nodefeature(name, node_label, labels)
    old = copy.deepcopy(obj) if operation == "UPDATE" else None
    request = AdmissionRequest(
        operation, "nfd.k8s-sigs.io", "nodefeatures", GFD, obj, old, pod_bound_claims("gpu-1")
    )
    assert both(nodefeature_policy, request) == Verdict(True, denials)


# ---------------------------------------------------------------- node health (status)


@pytest.fixture(scope="module")
def health_policy() -> CelPolicy:
    return CelPolicy(one(render("standalone"), "ValidatingAdmissionPolicy", "gfd-node-health"))


@pytest.fixture(scope="module")
def events_policy() -> CelPolicy:
    return CelPolicy(one(render("standalone"), "ValidatingAdmissionPolicy", "gfd-node-events"))


def condition(kind: str, status: str = "True", reason: str = "GPUsHealthy") -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": "8 of 8 GPUs healthy",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


READY = condition("Ready", reason="KubeletReady")
KERNEL_DEADLOCK = condition("KernelDeadlock", "False", "KernelHasNoDeadlock")


def status_node(conditions: list[dict[str, str]], **status: Any) -> dict[str, Any]:
    """A node as the API server stores it: its status always has daemonEndpoints and
    nodeInfo, even when no kubelet ever wrote it."""
    obj = node()
    obj["status"] = {
        "capacity": {"cpu": "64", "nvidia.com/gpu": "8"},
        "allocatable": {"cpu": "63", "nvidia.com/gpu": "8"},
        "conditions": copy.deepcopy(conditions),
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": "m", "kubeletVersion": "v1.36.2"},
        **status,
    }
    return obj


def status_update(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    claim: str | None = "gpu-1",
    user: str = GFD,
    node_bound: bool = False,
) -> AdmissionRequest:
    request = update(old, new, claim=claim, user=user, node_bound=node_bound)
    return AdmissionRequest(
        "UPDATE", "", "nodes", request.user, new, old, request.extra, subresource="status"
    )


def with_conditions(obj: dict[str, Any], conditions: list[dict[str, str]]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["status"]["conditions"] = copy.deepcopy(conditions)
    return changed


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # A strategic merge patch puts a new entry first (seen on a real server).
        ([READY, KERNEL_DEADLOCK], [condition("GPUHealthy"), READY, KERNEL_DEADLOCK]),
        ([], [condition("GPUHealthy")]),
        (
            [condition("GPUHealthy"), READY],
            [condition("GPUHealthy", "False", "GPULost"), READY],
        ),
        ([READY, condition("GPUHealthy")], [condition("GPUHealthy"), READY]),
        ([READY, condition("GPUHealthy"), KERNEL_DEADLOCK], [READY, KERNEL_DEADLOCK]),
    ],
    ids=["add", "add-first", "change", "move", "remove"],
)
def test_gfd_may_add_change_and_remove_its_condition(
    health_policy: CelPolicy, before: list[dict[str, str]], after: list[dict[str, str]]
) -> None:
    old = status_node(before)
    assert both(health_policy, status_update(old, with_conditions(old, after))) == Verdict(True)


@pytest.mark.parametrize("reason", sorted(HEALTH_REASONS))
@pytest.mark.parametrize("status", ["True", "False"])
def test_every_reason_of_gfds_is_allowed(
    health_policy: CelPolicy, reason: str, status: str
) -> None:
    old = status_node([READY])
    new = with_conditions(old, [condition("GPUHealthy", status, reason), READY])
    assert both(health_policy, status_update(old, new)) == Verdict(True)


@pytest.mark.parametrize(
    "after",
    [
        [condition("GPUHealthy"), condition("Ready", "False", "KubeletNotReady"), KERNEL_DEADLOCK],
        [condition("GPUHealthy"), READY],
        [condition("GPUHealthy"), KERNEL_DEADLOCK, READY],
        [condition("GPUHealthy"), READY, KERNEL_DEADLOCK, condition("MemoryPressure", "False")],
        [condition("GPUHealthy"), {**READY, "message": "forged"}, KERNEL_DEADLOCK],
    ],
    ids=["change-ready", "remove-kernel-deadlock", "reorder", "add-another", "change-message"],
)
def test_other_conditions_are_out_of_bounds(
    health_policy: CelPolicy, after: list[dict[str, str]]
) -> None:
    old = status_node([READY, KERNEL_DEADLOCK])
    verdict = both(health_policy, status_update(old, with_conditions(old, after)))
    assert verdict.denials == (HEALTH_FOREIGN_CONDITIONS,)


@pytest.mark.parametrize(
    "mine",
    [
        [condition("GPUHealthy", "Unknown")],
        [condition("GPUHealthy", reason="LooksFine")],
        [{k: v for k, v in condition("GPUHealthy").items() if k != "reason"}],
        [condition("GPUHealthy"), condition("GPUHealthy", "False", "GPULost")],
    ],
    ids=["status-unknown", "foreign-reason", "no-reason", "two-entries"],
)
def test_gfds_condition_has_gfds_shape(
    health_policy: CelPolicy, mine: list[dict[str, str]]
) -> None:
    old = status_node([READY])
    verdict = both(health_policy, status_update(old, with_conditions(old, [*mine, READY])))
    assert verdict.denials == (HEALTH_CONDITION_SHAPE,)


STATUS_CHANGES: dict[str, Any] = {
    "capacity": {"cpu": "64", "nvidia.com/gpu": "16"},
    "allocatable": {"cpu": "63", "nvidia.com/gpu": "0"},
    "phase": "Running",
    "addresses": [{"type": "InternalIP", "address": "10.9.9.9"}],
    "daemonEndpoints": {"kubeletEndpoint": {"Port": 1}},
    "nodeInfo": {"machineID": "other", "kubeletVersion": "v1.36.2"},
    "images": [{"names": ["registry.example/evil:latest"], "sizeBytes": 1}],
    "volumesInUse": ["kubernetes.io/csi/x"],
    "volumesAttached": [{"name": "kubernetes.io/csi/x", "devicePath": "/dev/x"}],
    "config": {"active": {"configMap": {"name": "x"}}},
    "runtimeHandlers": [{"name": "nvidia", "features": {}}],
    "features": {"supplementalGroupsPolicy": True},
    "declaredFeatures": ["GuaranteedQoSPodCPUResize"],
}


def test_every_other_status_field_is_named() -> None:
    assert set(STATUS_CHANGES) == set(NODE_STATUS_FIELDS)


@pytest.mark.parametrize("name", NODE_STATUS_FIELDS)
@pytest.mark.parametrize("how", ["change", "remove"])
def test_other_status_fields_are_out_of_bounds(
    health_policy: CelPolicy, name: str, how: str
) -> None:
    old = status_node([READY], phase="Running" if name != "phase" else "Pending")
    new = copy.deepcopy(old)
    if how == "remove" and name in old["status"]:
        del new["status"][name]
    else:
        new["status"][name] = STATUS_CHANGES[name]
    new["status"]["conditions"].insert(0, condition("GPUHealthy"))
    verdict = both(health_policy, status_update(old, new))
    assert verdict.denials == (HEALTH_STATUS_FIELDS,)
    assert verdict.details == (
        f"gfd may change only the GPUHealthy condition of a node's status (not {name})",
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.count": "8"}),
        lambda n: n["metadata"]["labels"].pop("kubernetes.io/hostname"),
        lambda n: n["metadata"]["annotations"].update({"nvidia.com/gfd.labels": "x"}),
        lambda n: n["metadata"].update({"finalizers": ["example.com/hold"]}),
        lambda n: n["metadata"].update({"ownerReferences": [{"kind": "X", "name": "x"}]}),
        lambda n: n["spec"].update({"unschedulable": True}),
    ],
    ids=["add-label", "remove-label", "annotation", "finalizer", "owner", "spec"],
)
def test_metadata_and_spec_through_status_are_out_of_bounds(
    health_policy: CelPolicy, change: Any
) -> None:
    old = status_node([READY])
    new = with_conditions(old, [condition("GPUHealthy"), READY])
    change(new)
    assert both(health_policy, status_update(old, new)).denials == (HEALTH_METADATA,)


@pytest.mark.parametrize(
    ("claim", "node_bound", "denials"),
    [
        ("gpu-2", False, (HEALTH_OWN,)),
        (None, False, (HEALTH_POD_BOUND, HEALTH_OWN)),
        ("gpu-1", True, (HEALTH_POD_BOUND,)),
    ],
    ids=["another-node", "token-without-claims", "node-bound-token"],
)
def test_health_only_of_its_own_node_with_a_pod_bound_token(
    health_policy: CelPolicy, claim: str | None, node_bound: bool, denials: tuple[str, ...]
) -> None:
    old = status_node([READY])
    new = with_conditions(old, [condition("GPUHealthy"), READY])
    verdict = both(health_policy, status_update(old, new, claim=claim, node_bound=node_bound))
    assert verdict.denials == denials
    if claim == "gpu-2":
        assert verdict.details == (
            "gfd running on node gpu-2 may not change the status of node gpu-1",
        )


def test_health_leaves_other_managers_entries(health_policy: CelPolicy) -> None:
    kubelet = {"manager": "kubelet", "operation": "Update", "subresource": "status"}
    by_hand = {
        "manager": "kubectl-patch",
        "operation": "Update",
        "subresource": "status",
        "fieldsV1": {"f:status": {"f:conditions": {".": {}, 'k:{"type":"GPUHealthy"}': {}}}},
    }
    broader = {
        **by_hand,
        "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"Ready"}': {}}}},
    }
    for dropped, denials in ((by_hand, ()), (broader, (NODE_MANAGED_FIELDS,))):
        old = status_node([condition("GPUHealthy"), READY])
        old["metadata"]["managedFields"] = [kubelet, dropped]
        new = with_conditions(old, [condition("GPUHealthy", "False", "GPULost"), READY])
        new["metadata"]["managedFields"] = [kubelet, {"manager": "gfd", "operation": "Update"}]
        assert both(health_policy, status_update(old, new)).denials == denials
    old = status_node([READY])
    old["metadata"]["managedFields"] = [kubelet]
    for forged in ([], [{**kubelet, "manager": "gfd"}], [kubelet, {**kubelet, "manager": "x"}]):
        new = with_conditions(old, [condition("GPUHealthy"), READY])
        new["metadata"]["managedFields"] = forged
        assert both(health_policy, status_update(old, new)).denials == (NODE_MANAGED_FIELDS,)


def test_status_and_node_policies_see_only_their_own_requests(
    node_policy: CelPolicy, health_policy: CelPolicy
) -> None:
    # resources: [nodes] does not match nodes/status, nor the reverse (as on the server).
    old = status_node([READY])
    relabelled = with_labels(old, {"kubernetes.io/hostname": "spoofed"})
    assert both(node_policy, status_update(old, relabelled)) == Verdict(False)
    assert both(health_policy, update(old, relabelled)) == Verdict(False)
    assert both(health_policy, status_update(old, relabelled)).denials == (HEALTH_METADATA,)


def test_health_of_other_users_is_not_judged(health_policy: CelPolicy) -> None:
    old = status_node([READY])
    new = with_conditions(old, [condition("Ready", "False", "KubeletNotReady")])
    for user in ("system:node:gpu-1", "system:serviceaccount:other:gfd", "admin"):
        request = status_update(old, new, claim=None, user=user)
        assert both(health_policy, request) == Verdict(False)


conditions_lists = st.lists(
    st.sampled_from(
        [
            READY,
            condition("Ready", "False", "KubeletNotReady"),
            KERNEL_DEADLOCK,
            condition("GPUHealthy"),
            condition("GPUHealthy", "False", "GPULost"),
            condition("GPUHealthy", "Unknown"),
            condition("GPUHealthy", reason="Other"),
        ]
    ),
    max_size=4,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=conditions_lists,
    after=conditions_lists,
    field=st.sampled_from([None, *NODE_STATUS_FIELDS]),
    relabel=st.booleans(),
    claim=st.sampled_from(["gpu-1", "gpu-2", None]),
)
def test_cel_and_intent_agree_on_generated_status_updates(
    health_policy: CelPolicy,
    before: list[dict[str, str]],
    after: list[dict[str, str]],
    field: str | None,
    relabel: bool,
    claim: str | None,
) -> None:
    old = status_node(before)
    new = with_conditions(old, after)
    if field is not None:
        new["status"][field] = STATUS_CHANGES[field]
    if relabel:
        new = with_labels(new, {"nvidia.com/gpu.count": "8"})
    both(health_policy, status_update(old, new, claim=claim))


# ---------------------------------------------------------------- events


def event(node_name: str = "gpu-1", **changes: Any) -> dict[str, Any]:
    """An Event about ``node_name`` as gfd sends it (plus ``changes``, None removes)."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node_name}.18a2b3c4d5e6f708", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": "0f0f"},
        "reason": "GPULost",
        "message": "GPU-0 is lost",
        "type": "Warning",
        "source": {"component": "gfd", "host": node_name},
        "reportingComponent": "gfd",
        "reportingInstance": node_name,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }
    for key, value in changes.items():
        if value is None:
            obj.pop(key, None)
        else:
            obj[key] = value
    return obj


def create_event(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    namespace: str = "default",
    claim: str | None = "gpu-1",
    node_bound: bool = False,
    user: str = GFD,
    old: dict[str, Any] | None = None,
) -> AdmissionRequest:
    extra = update(node(), node(), claim=claim, node_bound=node_bound).extra
    return AdmissionRequest(operation, "", "events", user, obj, old, extra, namespace=namespace)


def test_gfd_may_create_events_about_its_node(events_policy: CelPolicy) -> None:
    assert both(events_policy, create_event(event())) == Verdict(True)
    recovered = event(reason="GPUsHealthy", type="Normal", source={"component": "gfd"})
    assert both(events_policy, create_event(recovered)) == Verdict(True)
    # A Node has no namespace: an empty one is the same reference.
    empty = event()
    empty["involvedObject"]["namespace"] = ""
    assert both(events_policy, create_event(empty)) == Verdict(True)


@pytest.mark.parametrize(
    "involved",
    [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-2"},
        {"apiVersion": "v1", "kind": "Pod", "name": "gpu-1", "namespace": NAMESPACE},
        {"apiVersion": "example.com/v1", "kind": "Node", "name": "gpu-1"},
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "namespace": NAMESPACE},
        {"apiVersion": "v1", "name": "gpu-1"},
    ],
    ids=["another-node", "a-pod", "another-group", "another-namespace", "no-kind"],
)
def test_events_about_anything_else_are_out_of_bounds(
    events_policy: CelPolicy, involved: dict[str, str]
) -> None:
    verdict = both(events_policy, create_event(event(involvedObject=involved)))
    assert verdict.denials == (EVENTS_OWN_NODE,)


def test_events_with_a_related_object_are_out_of_bounds(events_policy: CelPolicy) -> None:
    related = {"apiVersion": "v1", "kind": "Pod", "name": "victim", "namespace": "default"}
    verdict = both(events_policy, create_event(event(related=related)))
    assert verdict.denials == (EVENTS_OWN_NODE,)


@pytest.mark.parametrize(
    "changes",
    [
        {"metadata": {"name": "gpu-2.18a2b3c4d5e6f708", "namespace": "default"}},
        {"metadata": {"name": "gpu-1x", "namespace": "default"}},
        {"source": {"component": "gfd", "host": "gpu-2"}},
        {"reportingInstance": "gpu-2"},
    ],
    ids=["another-nodes-name", "no-dot", "source-host", "reporting-instance"],
)
def test_events_report_from_their_node(events_policy: CelPolicy, changes: dict[str, Any]) -> None:
    verdict = both(events_policy, create_event(event(**changes)))
    assert verdict.denials == (EVENTS_IDENTITY,)


def test_events_elsewhere_or_by_other_tokens_are_out_of_bounds(events_policy: CelPolicy) -> None:
    for namespace in (NAMESPACE, "kube-system"):
        elsewhere = event()
        elsewhere["metadata"]["namespace"] = namespace
        assert both(events_policy, create_event(elsewhere, namespace=namespace)).denials == (
            EVENTS_NAMESPACE,
        )
    assert both(events_policy, create_event(event(), node_bound=True)).denials == (
        EVENTS_POD_BOUND,
    )
    assert both(events_policy, create_event(event(), claim=None)).denials == (
        EVENTS_POD_BOUND,
        EVENTS_OWN_NODE,
        EVENTS_IDENTITY,
    )
    assert both(events_policy, create_event(event(), claim="gpu-2")).denials == (
        EVENTS_OWN_NODE,
        EVENTS_IDENTITY,
    )


def test_events_are_never_changed_or_deleted(events_policy: CelPolicy) -> None:
    for operation, obj, old in (("UPDATE", event(), event()), ("DELETE", None, event())):
        verdict = both(events_policy, create_event(obj, operation=operation, old=old))
        assert verdict.applies and EVENTS_OPERATION in verdict.denials


def test_events_of_other_users_are_not_judged(events_policy: CelPolicy) -> None:
    about_a_pod = event(involvedObject={"kind": "Pod", "name": "x", "namespace": NAMESPACE})
    for user in ("system:node:gpu-1", "system:serviceaccount:other:gfd", "admin"):
        assert both(events_policy, create_event(about_a_pod, claim=None, user=user)) == Verdict(
            False
        )


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    involved_name=st.sampled_from(["gpu-1", "gpu-2"]),
    kind=st.sampled_from(["Node", "Pod", None]),
    involved_namespace=st.sampled_from([NAMESPACE, "", "default", None]),
    name_node=st.sampled_from(["gpu-1", "gpu-2"]),
    host=st.sampled_from(["gpu-1", "gpu-2", None]),
    namespace=st.sampled_from([NAMESPACE, "default"]),
    claim=st.sampled_from(["gpu-1", "gpu-2", None]),
    node_bound=st.booleans(),
)
def test_cel_and_intent_agree_on_generated_events(
    events_policy: CelPolicy,
    involved_name: str,
    kind: str | None,
    involved_namespace: str | None,
    name_node: str,
    host: str | None,
    namespace: str,
    claim: str | None,
    node_bound: bool,
) -> None:
    obj = event(name_node)
    involved: dict[str, str] = {"apiVersion": "v1", "name": involved_name}
    if kind is not None:
        involved["kind"] = kind
    if involved_namespace is not None:
        involved["namespace"] = involved_namespace
    obj["involvedObject"] = involved
    obj["source"] = {"component": "gfd", **({"host": host} if host else {})}
    obj["reportingInstance"] = host or name_node
    request = create_event(obj, namespace=namespace, claim=claim, node_bound=node_bound)
    both(events_policy, request)


# ---------------------------------------------------------------- real sink traffic


@pytest.fixture
def emulator() -> Iterator[Any]:
    server = pytest.importorskip("tests.emulator.server")
    with server.ApiServerEmulator() as running:
        yield running


def replay_writes(emulator: Any, snapshots: list[dict[str, Any] | None]) -> list[tuple[Any, Any]]:
    """(request, (old, new)) for every successful write, rebuilt from the snapshots
    taken just before each write and the bodies the emulator logged."""
    patching = pytest.importorskip("tests.emulator.patching")
    writes = [r for r in emulator.requests if r.is_write]
    assert len(writes) == len(snapshots)
    pairs = []
    for request, old in zip(writes, snapshots, strict=True):
        if request.status >= 300:
            continue
        if request.method == "PATCH" and request.content_type.startswith(
            "application/json-patch+json"
        ):
            new = patching.json_patch(copy.deepcopy(old), request.body)
        elif request.method == "PATCH":
            assert request.content_type.startswith("application/merge-patch+json")
            new = patching.merge_patch(copy.deepcopy(old), request.body)
        else:
            new = request.body
        pairs.append((request, (old, new)))
    return pairs


def test_node_sink_traffic_passes_the_policy(
    emulator: Any, node_policy: CelPolicy, tmp_path: Path
) -> None:
    server = pytest.importorskip("tests.emulator.server")
    from gfd.kube_api import connect_kubernetes
    from gfd.sinks import Publication
    from gfd.sinks.node import TOPOLOGY_ANNOTATION, NodeSink

    server.seed_gfd_cluster(
        emulator,
        node_name="gpu-1",
        namespace=NAMESPACE,
        token="gfd-token",
        node_labels={"kubernetes.io/hostname": "gpu-1", "nvidia.com/stale": "x"},
        node_annotations={"nfd.node.kubernetes.io/feature-labels": "pci-10de.present"},
    )
    snapshots: list[dict[str, Any] | None] = []
    emulator.before(lambda e: snapshots.append(e.get("nodes", "gpu-1")), method="PATCH", times=None)
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", "gfd-token")
    client = connect_kubernetes(kubeconfig=str(kubeconfig))
    sink = NodeSink(client=client, node_name="gpu-1", stop=threading.Event())
    try:
        sink.publish(
            Publication(
                labels={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "hopper"},
                annotations={TOPOLOGY_ANNOTATION: '{"gpus":8}'},
            )
        )
        sink.publish(Publication(labels={"nvidia.com/gpu.count": "4"}))
    finally:
        client.close()
    pairs = replay_writes(emulator, snapshots)
    assert len(pairs) == 2
    for recorded, (old, new) in pairs:
        assert recorded.user == GFD
        request = update(old, new, claim="gpu-1", user=recorded.user)
        assert both(node_policy, request) == Verdict(True), recorded.body
        # The same write from gfd on another node is refused.
        stolen = update(old, new, claim="gpu-2", user=recorded.user)
        assert both(node_policy, stolen).denials == (NODE_OWN,)
    # What the replay rebuilt is what the emulator stored.
    final = emulator.get("nodes", "gpu-1")
    assert pairs[-1][1][1]["metadata"]["labels"] == final["metadata"]["labels"]


def test_guarded_json_patches_of_a_busy_node_pass_the_policy(
    emulator: Any, node_policy: CelPolicy, tmp_path: Path
) -> None:
    """After a 409 the sink re-plans as a JSON Patch guarded by ``test`` operations: the
    policy judges the object it makes, whatever the patch type, and lets it through."""
    server = pytest.importorskip("tests.emulator.server")
    from gfd.kube_api import connect_kubernetes
    from gfd.sinks import Publication
    from gfd.sinks.node import NodeSink

    server.seed_gfd_cluster(
        emulator,
        node_name="gpu-1",
        namespace=NAMESPACE,
        token="gfd-token",
        node_labels={"kubernetes.io/hostname": "gpu-1"},
    )
    snapshots: list[dict[str, Any] | None] = []
    writes = {"n": 0}

    def another_writer_first(api: Any) -> None:
        # Each of gfd's merge patches meets a node changed since gfd read it (an unrelated
        # label), so the precondition fails and the sink falls back to its guarded patch.
        writes["n"] += 1
        api.change_node_metadata("gpu-1", labels={"example.com/other": str(writes["n"])})

    emulator.before(another_writer_first, method="PATCH", times=None)
    emulator.before(lambda e: snapshots.append(e.get("nodes", "gpu-1")), method="PATCH", times=None)
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", "gfd-token")
    client = connect_kubernetes(kubeconfig=str(kubeconfig))
    sink = NodeSink(client=client, node_name="gpu-1", stop=threading.Event())
    try:
        sink.publish(
            Publication(labels={"nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "hopper"})
        )
        sink.publish(Publication(labels={"nvidia.com/gpu.count": "4"}))
    finally:
        client.close()
    kinds = [r.content_type.split(";")[0] for r in emulator.requests if r.is_write]
    assert "application/json-patch+json" in kinds, kinds
    pairs = replay_writes(emulator, snapshots)
    assert any(r.content_type.startswith("application/json-patch+json") for r, _ in pairs)
    for recorded, (old, new) in pairs:
        request = update(old, new, claim="gpu-1", user=recorded.user)
        assert both(node_policy, request) == Verdict(True), recorded.body
        stolen = update(old, new, claim="gpu-2", user=recorded.user)
        assert both(node_policy, stolen).denials == (NODE_OWN,)
    final = emulator.get("nodes", "gpu-1")["metadata"]["labels"]
    assert final["nvidia.com/gpu.count"] == "4" and "nvidia.com/gpu.family" not in final
    assert final["example.com/other"] == str(writes["n"])


def test_nodefeature_sink_traffic_passes_the_policy(
    emulator: Any, nodefeature_policy: CelPolicy, tmp_path: Path
) -> None:
    server = pytest.importorskip("tests.emulator.server")
    from gfd.kube_api import connect_kubernetes
    from gfd.sinks import Publication
    from gfd.sinks.nodefeature import NodeFeatureSink, nodefeature_name

    seeded = server.seed_gfd_cluster(
        emulator, node_name="gpu-1", namespace=NAMESPACE, token="gfd-token"
    )
    name = nodefeature_name("gpu-1")
    snapshots: list[dict[str, Any] | None] = []
    for method in ("POST", "PUT"):
        emulator.before(
            lambda e: snapshots.append(e.nodefeature(NAMESPACE, name)), method=method, times=None
        )
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", "gfd-token")
    client = connect_kubernetes(kubeconfig=str(kubeconfig))
    sink = NodeFeatureSink(
        client=client,
        node_name="gpu-1",
        namespace=NAMESPACE,
        pod_name=seeded["pod"]["metadata"]["name"],
        stop=threading.Event(),
    )
    try:
        sink.publish(Publication(labels={"nvidia.com/gpu.count": "8"}))
        sink.publish(Publication(labels={"nvidia.com/gpu.count": "4"}))
    finally:
        client.close()
    pairs = replay_writes(emulator, snapshots)
    assert [r.method for r, _ in pairs] == ["POST", "PUT"]
    for recorded, (old, new) in pairs:
        operation = "CREATE" if recorded.method == "POST" else "UPDATE"
        request = AdmissionRequest(
            operation,
            "nfd.k8s-sigs.io",
            "nodefeatures",
            recorded.user,
            new,
            old,
            pod_bound_claims("gpu-1"),
        )
        assert both(nodefeature_policy, request) == Verdict(True), recorded.body
        elsewhere = AdmissionRequest(
            operation,
            "nfd.k8s-sigs.io",
            "nodefeatures",
            recorded.user,
            new,
            old,
            pod_bound_claims("gpu-2"),
        )
        assert both(nodefeature_policy, elsewhere).denials == (NODEFEATURE_IDENTITY,)


def test_health_taint_traffic_passes_the_policies(
    emulator: Any, node_policy: CelPolicy, events_policy: CelPolicy, tmp_path: Path
) -> None:
    """gfd's taint writer, as it runs: its guarded JSON Patches (the taint added beside
    others' taints, then removed) are admitted on its own node and refused on another, and
    its Events pass the events policy."""
    server = pytest.importorskip("tests.emulator.server")
    patching = pytest.importorskip("tests.emulator.patching")
    from gfd.health.condition import HealthState
    from gfd.health.taint import NodeTaintWriter
    from gfd.kube_api import connect_kubernetes
    from gfd.sinks.node import NodeSink

    server.seed_gfd_cluster(emulator, node_name="gpu-1", namespace=NAMESPACE, token="gfd-token")
    emulator.edit_object(
        "nodes", "gpu-1", mutate=lambda node: node["spec"].update(taints=copy.deepcopy(FOREIGN))
    )
    snapshots: list[dict[str, Any] | None] = []
    emulator.before(
        lambda e: snapshots.append(e.get("nodes", "gpu-1")),
        method="PATCH",
        path_contains="/nodes/gpu-1",
        times=None,
    )
    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", "gfd-token")
    client = connect_kubernetes(kubeconfig=str(kubeconfig))
    stop = threading.Event()
    sink = NodeSink(client=client, node_name="gpu-1", stop=stop)
    writer = NodeTaintWriter(client=client, node_sink=sink, stop=stop, effect="NoExecute")
    try:
        for state in (
            HealthState(False, "GPULost", "GPU 3 (0000:1e:00.0) is lost"),
            HealthState(True, "GPUsHealthy", "every GPU health check passes"),
        ):
            writer.saw(sink.read_ahead())
            writer.write(state, None)
    finally:
        client.close()
    patches = [r for r in emulator.requests if r.method == "PATCH"]
    assert [r.content_type for r in patches] == ["application/json-patch+json"] * 2
    for recorded, old in zip(patches, snapshots, strict=True):
        new = patching.json_patch(copy.deepcopy(old), recorded.body)
        assert both(node_policy, update(old, new, user=recorded.user)) == Verdict(True)
        stolen = update(old, new, claim="gpu-2", user=recorded.user)
        assert both(node_policy, stolen).denials == (NODE_OWN,)
    assert emulator.node("gpu-1")["spec"]["taints"] == FOREIGN
    posts = [r for r in emulator.requests if r.method == "POST"]
    assert len(posts) == 2
    for recorded in posts:
        assert both(events_policy, create_event(recorded.body)) == Verdict(True)
