"""The ValidatingAdmissionPolicies of deploy/: their CEL (run by cel-python) and a plain
Python statement of their intent agree, on chosen cases, on generated ones, and on
the requests gfd's real sinks send to the API server emulator."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.deploy.admission_model import (
    NODE_ANNOTATIONS,
    NODE_LABELS,
    NODE_MANAGED_FIELDS,
    NODE_NAME_CLAIM,
    NODE_OPERATION,
    NODE_OPERATOR,
    NODE_OTHER_FIELDS,
    NODE_OWN,
    NODE_POD_BOUND,
    NODEFEATURE_FEATURES,
    NODEFEATURE_IDENTITY,
    NODEFEATURE_LABELS,
    NODEFEATURE_POD_BOUND,
    AdmissionRequest,
    CelPolicy,
    Verdict,
    node_feature_policy_intent,
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


def both(policy: CelPolicy, request: AdmissionRequest) -> Verdict:
    """The CEL verdict, after checking that the Python intent says the same."""
    cel = policy.evaluate(request)
    if request.resource == "nodes":
        intent = node_policy_intent(request, namespace=NAMESPACE)
    else:
        intent = node_feature_policy_intent(request, namespace=NAMESPACE)
    if request.operation == "UPDATE" or request.resource == "nodefeatures":
        assert cel == intent
    else:
        # CREATE/DELETE of a node: both deny; CEL also reports the rules that could
        # not be evaluated without an old or new object.
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
    assert both(node_policy, update(old, new)).denials == (NODE_OTHER_FIELDS,)
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
) -> None:
    old = node(labels=old_labels, annotations=old_annotations)
    new = node(labels=new_labels, annotations=new_annotations)
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
        if request.method == "PATCH":
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
    from gfd.sinks import Publication
    from gfd.sinks.kube import connect_kubernetes
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


def test_nodefeature_sink_traffic_passes_the_policy(
    emulator: Any, nodefeature_policy: CelPolicy, tmp_path: Path
) -> None:
    server = pytest.importorskip("tests.emulator.server")
    from gfd.sinks import Publication
    from gfd.sinks.kube import connect_kubernetes
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
