"""What the real kube-apiserver refuses to gfd's ServiceAccount, with deploy/'s RBAC and
ValidatingAdmissionPolicies: each case sends, with a pod-bound token of gfd's DaemonSet, one
request that a compromised gfd pod could try, and expects 403 and the node (or NodeFeature)
unchanged. The first cases show that the same token may do what gfd does, so the refusals
are the policy's and not a broken token."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

import pytest

from gfd.sinks.node import OWNERSHIP_ANNOTATION, TOPOLOGY_ANNOTATION
from tests.deploy.manifests import NAMESPACE, one
from tests.realkube.cluster import GfdCluster, GfdPod, deploy_objects

pytestmark = pytest.mark.oracle("kube")

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
NODEFEATURES = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"

#: Node labels by which the GPU Operator steers what runs on a node: a gfd pod that could
#: change them could switch off the driver or repartition MIG under running work.
OPERATOR_CONTROL_LABELS = (
    "nvidia.com/gpu.deploy.driver",
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.mig-manager",
    "nvidia.com/mig.config",
    "nvidia.com/mig.config.state",
    "nvidia.com/device-plugin.config",
    "nvidia.com/gpu.workload.config",
    "nvidia.com/vgpu.config",
    "nvidia.com/cc.mode",
    "nvidia.com/gpu.present",
)


def patch_labels(
    kube: GfdCluster, who: GfdPod | str, node: str, labels: dict[str, str | None]
) -> tuple[int, Any]:
    return kube.as_gfd(
        who, "PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}}, content_type=MERGE
    )


def patch_annotations(
    kube: GfdCluster, who: GfdPod, node: str, annotations: dict[str, str | None]
) -> tuple[int, Any]:
    return kube.as_gfd(
        who,
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"annotations": annotations}},
        content_type=MERGE,
    )


def assert_refused(reply: tuple[int, Any], *, by_policy: bool = True) -> str:
    status, body = reply
    assert status == 403, f"expected 403, got {status}: {str(body)[:300]}"
    message = str(body.get("message", "")) if isinstance(body, dict) else str(body)
    if by_policy:
        assert "ValidatingAdmissionPolicy" in message, message
    return message


# --------------------------------------------------------------------- allowed


def test_gfd_may_set_and_remove_its_labels_and_annotations(
    kube: GfdCluster, node: str, pod: GfdPod
) -> None:
    status, body = patch_labels(kube, pod, node, {"nvidia.com/gpu.count": "8"})
    assert status == 200, body
    status, body = patch_annotations(
        kube, pod, node, {OWNERSHIP_ANNOTATION: "gpu.count", TOPOLOGY_ANNOTATION: "{}"}
    )
    assert status == 200, body
    status, body = patch_labels(kube, pod, node, {"nvidia.com/gpu.count": None})
    assert status == 200, body
    assert "nvidia.com/gpu.count" not in kube.labels(node)


# --------------------------------------------------------------------- refused


def test_another_node_is_refused(kube: GfdCluster, pod: GfdPod) -> None:
    other = kube.node()
    message = assert_refused(patch_labels(kube, pod, other, {"nvidia.com/gpu.count": "8"}))
    assert pod.node in message and other in message
    assert "nvidia.com/gpu.count" not in kube.labels(other)


def test_creating_or_deleting_a_node_is_refused(kube: GfdCluster, pod: GfdPod) -> None:
    # RBAC grants get and patch only: these never reach the policy.
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": kube.unique("rogue")}}
    assert_refused(kube.as_gfd(pod, "POST", "/api/v1/nodes", body), by_policy=False)
    assert_refused(kube.as_gfd(pod, "DELETE", f"/api/v1/nodes/{pod.node}"), by_policy=False)


@pytest.mark.parametrize("key", ["example.com/team", "kubernetes.io/hostname", "gpu"])
def test_foreign_label_keys_are_refused(kube: GfdCluster, pod: GfdPod, key: str) -> None:
    before = kube.labels(pod.node)
    assert_refused(patch_labels(kube, pod, pod.node, {key: "changed"}))
    assert kube.labels(pod.node) == before


def test_removing_a_foreign_label_is_refused(kube: GfdCluster) -> None:
    node = kube.node(labels={"example.com/team": "vision"})
    pod = kube.gfd_pod(node)
    assert_refused(patch_labels(kube, pod, node, {"example.com/team": None}))
    assert kube.labels(node)["example.com/team"] == "vision"


@pytest.mark.parametrize("key", OPERATOR_CONTROL_LABELS)
def test_gpu_operator_control_labels_are_refused(kube: GfdCluster, key: str) -> None:
    node = kube.node(labels={key: "true"})
    pod = kube.gfd_pod(node)
    message = assert_refused(patch_labels(kube, pod, node, {key: "false"}))
    assert f"GPU Operator's control labels ({key})" in message
    assert_refused(patch_labels(kube, pod, node, {key: None}))
    bare = kube.node()
    assert_refused(patch_labels(kube, kube.gfd_pod(bare), bare, {key: "all-disabled"}))
    assert kube.labels(node)[key] == "true"
    assert key not in kube.labels(bare)


@pytest.mark.parametrize(
    "key", ["nvidia.com/gpu-driver-upgrade-state", "example.com/owner", "nvidia.com/anything"]
)
def test_annotations_other_than_gfds_are_refused(kube: GfdCluster, pod: GfdPod, key: str) -> None:
    assert_refused(patch_annotations(kube, pod, pod.node, {key: "x"}))
    assert key not in kube.annotations(pod.node)


def test_rewriting_managed_fields_is_refused(kube: GfdCluster, pod: GfdPod) -> None:
    path = f"/api/v1/nodes/{pod.node}"
    before = kube.node_metadata(pod.node)["managedFields"]
    # An empty entry resets the server's field ownership records (documented behaviour).
    wipe = {"metadata": {"managedFields": [{}]}}
    assert_refused(kube.as_gfd(pod, "PATCH", path, wipe, content_type=MERGE))
    # Claiming every other manager's fields as gfd's.
    forged = [{**entry, "manager": "gfd"} for entry in before]
    assert_refused(
        kube.as_gfd(pod, "PATCH", path, {"metadata": {"managedFields": forged}}, content_type=MERGE)
    )
    assert kube.node_metadata(pod.node)["managedFields"] == before


def test_spec_and_finalizers_are_refused(kube: GfdCluster, pod: GfdPod) -> None:
    path = f"/api/v1/nodes/{pod.node}"
    for body in (
        {"spec": {"unschedulable": True}},
        {"metadata": {"finalizers": ["example.com/hold"]}},
    ):
        assert_refused(kube.as_gfd(pod, "PATCH", path, body, content_type=MERGE))
    assert not kube.admin.get(path).get("spec", {}).get("unschedulable")


def test_a_node_bound_token_is_refused(kube: GfdCluster, node: str) -> None:
    # A token bound to the Node (not to a Pod on it) carries the node-name claim too;
    # only a token bound to a running Pod of gfd may label the node.
    token = kube.node_bound_token(node)
    assert_refused(patch_labels(kube, token, node, {"nvidia.com/gpu.count": "8"}))
    assert "nvidia.com/gpu.count" not in kube.labels(node)


def test_a_token_bound_to_a_deleted_pod_is_refused(kube: GfdCluster, node: str) -> None:
    pod = kube.gfd_pod(node)
    # No kubelet runs here to finish a graceful deletion: delete at once.
    kube.admin.request(
        "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod.name}", {"gracePeriodSeconds": 0}
    )
    deadline = time.monotonic() + 10
    while True:
        status, _ = patch_labels(kube, pod, node, {"nvidia.com/gpu.count": "8"})
        if status != 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == 401


# --------------------------------------------------------------------- NodeFeature


def nodefeature(node: str, *, name: str | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": name or f"nvidia-features-for-{node}",
            "namespace": NAMESPACE,
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": spec or {"labels": {"nvidia.com/gpu.count": "8"}},
    }


def test_gfd_may_create_its_nodefeature(kube: GfdCluster, pod: GfdPod) -> None:
    status, body = kube.as_gfd(pod, "POST", NODEFEATURES, nodefeature(pod.node))
    assert status == 201, body


@pytest.mark.parametrize(
    "case",
    ["another-node", "wrong-name", "foreign-label-key", "raw-features"],
)
def test_nodefeature_outside_its_bounds_is_refused(
    kube: GfdCluster, pod: GfdPod, case: str
) -> None:
    other = kube.node()
    obj = {
        "another-node": nodefeature(other),
        "wrong-name": nodefeature(pod.node, name=f"gfd-{pod.node}"),
        "foreign-label-key": nodefeature(pod.node, labels={"example.com/x": "1"}),
        "raw-features": nodefeature(
            pod.node,
            labels={"nvidia.com/gpu.count": "8"},
            features={"flags": {"cpu.cpuid": {"elements": {"AVX512": {}}}}},
        ),
    }[case]
    assert_refused(kube.as_gfd(pod, "POST", NODEFEATURES, obj))


def test_nodefeature_from_a_node_bound_token_is_refused(kube: GfdCluster, node: str) -> None:
    token = kube.node_bound_token(node)
    assert_refused(kube.as_gfd(token, "POST", NODEFEATURES, nodefeature(node)))


# --------------------------------------------------------------------- test of the test


def _without_validation(policy: dict[str, Any], message_start: str) -> dict[str, Any]:
    broken = copy.deepcopy(policy)
    rules = broken["spec"]["validations"]
    kept = [v for v in rules if not v["message"].startswith(message_start)]
    assert len(kept) == len(rules) - 1, f"no validation whose message starts {message_start!r}"
    broken["spec"]["validations"] = kept
    return broken


def _apply_and_wait(kube: GfdCluster, policy: dict[str, Any], until: Any) -> None:
    kube.admin.apply(policy)
    deadline = time.monotonic() + 20
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"policy {policy['metadata']['name']} not in force after 20 s")
        time.sleep(0.1)


def test_a_broken_policy_fails_these_tests(kube: GfdCluster) -> None:
    """The refusal checks above depend on the policy: with the GPU Operator rule taken out
    of the node policy on the real server, the operator-label case fails, and it passes
    again once the policy is restored."""
    policy = one(deploy_objects(), "ValidatingAdmissionPolicy", "gfd-node-labeler")
    broken = _without_validation(policy, "gfd may not add, change or remove the GPU Operator")
    probe_node = kube.node(labels={"nvidia.com/mig.config": "all-disabled"})
    probe = kube.gfd_pod(probe_node)

    def refused() -> bool:
        value = uuid.uuid4().hex[:8]  # a change each time, or the policy has nothing to judge
        status, _ = patch_labels(kube, probe, probe_node, {"nvidia.com/mig.config": value})
        return status == 403

    try:
        _apply_and_wait(kube, broken, lambda: not refused())
        with pytest.raises(AssertionError, match="expected 403, got 200"):
            test_gpu_operator_control_labels_are_refused(kube, "nvidia.com/mig.config")
    finally:
        _apply_and_wait(kube, policy, refused)
    test_gpu_operator_control_labels_are_refused(kube, "nvidia.com/mig.config")


@pytest.mark.parametrize(
    "name", ["gfd-node-labeler", "gfd-node-health", "gfd-node-events", "gfd-node-feature-writer"]
)
def test_the_policies_type_check_against_the_servers_schemas(
    kube: GfdCluster, garbage_collector: Any, name: str
) -> None:
    """kube-controller-manager checks every expression against the Node and NodeFeature
    schemas the server serves; a misspelt field would be a warning here, and a denial of
    every gfd request at run time (failurePolicy: Fail). The control: a copy with a
    misspelt field (and no binding, so it judges nothing) does get a warning."""
    policy = one(deploy_objects(), "ValidatingAdmissionPolicy", name)
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    if any("/" in resource for rule in rules for resource in rule["resources"]):
        # The type checker skips a rule on a subresource (nodes/status): it says nothing
        # of such a policy, right or wrong. Its twin on the resource itself, with no
        # binding, is checked against the same Node schema.
        policy = _on_the_resource(kube, policy)
        name = policy["metadata"]["name"]
    assert own_kind_warnings(kube, name) == []
    typo = copy.deepcopy(policy)
    typo["metadata"]["name"] = kube.unique("typo-probe")
    typo["spec"]["validations"][0]["expression"] = "object.metadata.nmae == ''"
    kube.admin.apply(typo)
    try:
        warnings = type_warnings(kube, typo["metadata"]["name"])
    finally:
        kube.admin.delete(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
            + typo["metadata"]["name"]
        )
    assert any("undefined field 'nmae'" in w["warning"] for w in warnings), warnings


def _on_the_resource(kube: GfdCluster, policy: dict[str, Any]) -> dict[str, Any]:
    twin = copy.deepcopy(policy)
    twin["metadata"] = {"name": kube.unique(f"twin-{policy['metadata']['name']}")}
    for rule in twin["spec"]["matchConstraints"]["resourceRules"]:
        rule["resources"] = [resource.split("/")[0] for resource in rule["resources"]]
    kube.admin.apply(twin)
    return twin


def own_kind_warnings(kube: GfdCluster, name: str) -> list[dict[str, str]]:
    """:func:`type_warnings` but those about events.k8s.io/v1's Event: the checker also
    checks a policy on core events against that equivalent kind, whose fields differ
    (regarding, note). At run time a request is converted to the kind the policy names,
    and an expression that cannot be evaluated denies (failurePolicy: Fail)."""
    return [
        w for w in type_warnings(kube, name) if not w["warning"].startswith("events.k8s.io/v1,")
    ]


def type_warnings(kube: GfdCluster, name: str) -> list[dict[str, str]]:
    """The type checker's warnings for policy ``name``, once it has checked this generation."""
    path = f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}"
    deadline = time.monotonic() + 30
    while True:
        policy = kube.admin.get(path)
        status = policy.get("status") or {}
        checked = status.get("observedGeneration") == policy["metadata"]["generation"]
        if checked and "typeChecking" in status:
            return list(status["typeChecking"].get("expressionWarnings", []))
        assert time.monotonic() < deadline, f"{name}: not type-checked after 30 s: {status}"
        time.sleep(0.2)
