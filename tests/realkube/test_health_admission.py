"""gfd's health reporting on the real kube-apiserver, with deploy/'s RBAC and the policies
gfd-node-health (nodes/status) and gfd-node-events (events): with a pod-bound token of
gfd's DaemonSet, the strategic-merge patch gfd sends sets its GPUHealthy condition on its
own node and leaves every other condition alone; every other change to a node's status,
and any status of another node, is refused; gfd may create Events about its own node in
default (where the API server files Events about a Node), and no other."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

import pytest

from tests.controlplane import AdminClient
from tests.deploy.admission_model import NODE_STATUS_FIELDS
from tests.deploy.manifests import NAMESPACE
from tests.realkube.cluster import GfdCluster, GfdPod
from tests.realkube.test_admission import assert_refused

pytestmark = pytest.mark.oracle("kube")

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
EVENTS = "/api/v1/namespaces/default/events"
FOREIGN_CONDITIONS = "gfd may add, change or remove only the node condition GPUHealthy"


def condition(kind: str, status: str = "True", reason: str = "GPUsHealthy") -> dict[str, str]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": f"{kind} is {status}",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


READY = condition("Ready", reason="KubeletReady")
KERNEL_DEADLOCK = condition("KernelDeadlock", "False", "KernelHasNoDeadlock")


def health_patch(status: str = "True", reason: str = "GPUsHealthy") -> dict[str, Any]:
    """Exactly the body gfd sends."""
    return {"status": {"conditions": [condition("GPUHealthy", status, reason)]}}


def patch_status(
    kube: GfdCluster, who: GfdPod | str, node: str, body: Any, content_type: str = SMP
) -> tuple[int, Any]:
    """A PATCH of ``node``'s status with ``who``'s token, under gfd's field manager name
    (gfd's client sends the user agent "gfd"; the policy leaves gfd's own entry free)."""
    token = who.token if isinstance(who, GfdPod) else who
    client = AdminClient(kube.plane.url, kube.plane.pki, token=token)
    return client.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        body,
        content_type=content_type,
        query={"fieldManager": "gfd"},
        ok=tuple(range(300, 600)),
    )


def status_of(kube: GfdCluster, node: str) -> dict[str, Any]:
    status: dict[str, Any] = kube.admin.get(f"/api/v1/nodes/{node}")["status"]
    return status


def conditions_of(kube: GfdCluster, node: str) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in status_of(kube, node).get("conditions") or []}


def set_foreign_conditions(kube: GfdCluster, node: str) -> None:
    """The kubelet's Ready and node-problem-detector's KernelDeadlock, as they write them."""
    kube.admin.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {"status": {"conditions": [READY, KERNEL_DEADLOCK]}},
        content_type=SMP,
    )


@pytest.fixture
def busy_node(kube: GfdCluster, pod: GfdPod) -> str:
    """gfd's node, with other components' conditions on it."""
    set_foreign_conditions(kube, pod.node)
    return pod.node


# --------------------------------------------------------------------- the condition


def test_gfd_sets_its_condition_and_leaves_the_others(
    kube: GfdCluster, pod: GfdPod, busy_node: str
) -> None:
    before = status_of(kube, busy_node)
    status, body = patch_status(kube, pod, busy_node, health_patch())
    assert status == 200, body
    after = status_of(kube, busy_node)
    conditions = {c["type"]: c for c in after["conditions"]}
    assert conditions["GPUHealthy"]["status"] == "True"
    assert conditions["GPUHealthy"]["reason"] == "GPUsHealthy"
    # The strategic merge puts the new entry first and leaves the others in their order.
    assert [c["type"] for c in after["conditions"]] == ["GPUHealthy", "Ready", "KernelDeadlock"]
    assert [c for c in after["conditions"] if c["type"] != "GPUHealthy"] == before["conditions"]
    assert {k: v for k, v in after.items() if k != "conditions"} == {
        k: v for k, v in before.items() if k != "conditions"
    }
    # A change of gfd's condition is changed in place.
    status, body = patch_status(kube, pod, busy_node, health_patch("False", "GPULost"))
    assert status == 200, body
    after = status_of(kube, busy_node)
    assert [c["type"] for c in after["conditions"]] == ["GPUHealthy", "Ready", "KernelDeadlock"]
    assert after["conditions"][0]["status"] == "False"
    assert after["conditions"][1:] == before["conditions"]


@pytest.mark.parametrize("reason", ["DevicePluginMissing", "AllocatableMismatch", "NVLinkDegraded"])
def test_each_of_gfds_reasons_is_allowed(kube: GfdCluster, pod: GfdPod, reason: str) -> None:
    status, body = patch_status(kube, pod, pod.node, health_patch("False", reason))
    assert status == 200, body
    assert conditions_of(kube, pod.node)["GPUHealthy"]["reason"] == reason


def test_gfd_may_remove_its_condition(kube: GfdCluster, pod: GfdPod, busy_node: str) -> None:
    assert patch_status(kube, pod, busy_node, health_patch())[0] == 200
    removal = {"status": {"conditions": [{"type": "GPUHealthy", "$patch": "delete"}]}}
    status, body = patch_status(kube, pod, busy_node, removal)
    assert status == 200, body
    assert list(conditions_of(kube, busy_node)) == ["Ready", "KernelDeadlock"]


@pytest.mark.parametrize(
    "change",
    [
        {"status": {"conditions": [condition("Ready", "False", "KubeletNotReady")]}},
        {"status": {"conditions": [condition("KernelDeadlock", "True", "DockerHung")]}},
        {"status": {"conditions": [{"type": "KernelDeadlock", "$patch": "delete"}]}},
        {"status": {"conditions": [condition("MemoryPressure", "False", "KubeletHasNoPressure")]}},
        # Replacing the whole list (a merge patch) with gfd's entry alone.
        {"status": {"conditions": [condition("GPUHealthy")]}, "_type": MERGE},
        # Moving the others among themselves.
        {
            "status": {
                "$setElementOrder/conditions": [{"type": "KernelDeadlock"}, {"type": "Ready"}],
                "conditions": [],
            }
        },
    ],
    ids=["ready", "kernel-deadlock", "remove-kernel-deadlock", "add-another", "replace", "reorder"],
)
def test_changing_another_condition_is_refused(
    kube: GfdCluster, pod: GfdPod, busy_node: str, change: dict[str, Any]
) -> None:
    body = copy.deepcopy(change)
    content_type = body.pop("_type", SMP)
    before = status_of(kube, busy_node)
    message = assert_refused(patch_status(kube, pod, busy_node, body, content_type))
    assert FOREIGN_CONDITIONS in message
    assert status_of(kube, busy_node) == before


@pytest.mark.parametrize(
    ("status", "reason"), [("Unknown", "GPUsHealthy"), ("True", "AllFine"), ("False", "")]
)
def test_a_condition_not_of_gfds_shape_is_refused(
    kube: GfdCluster, pod: GfdPod, status: str, reason: str
) -> None:
    message = assert_refused(patch_status(kube, pod, pod.node, health_patch(status, reason)))
    assert "gfd's GPUHealthy condition must be one entry" in message
    assert "GPUHealthy" not in conditions_of(kube, pod.node)


def test_another_nodes_status_is_refused(kube: GfdCluster, pod: GfdPod) -> None:
    other = kube.node()
    set_foreign_conditions(kube, other)
    message = assert_refused(patch_status(kube, pod, other, health_patch("False", "GPULost")))
    assert f"gfd running on node {pod.node} may not change the status of node {other}" in message
    assert "GPUHealthy" not in conditions_of(kube, other)


def test_a_node_bound_token_may_not_set_the_condition(kube: GfdCluster, node: str) -> None:
    token = kube.node_bound_token(node)
    message = assert_refused(patch_status(kube, token, node, health_patch()))
    assert "only with a token bound to its Pod" in message


# --------------------------------------------------------------------- the rest of the node


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("capacity", {"nvidia.com/gpu": "16"}),
        ("allocatable", {"nvidia.com/gpu": "0"}),
        ("addresses", [{"type": "InternalIP", "address": "10.9.9.9"}]),
        ("nodeInfo", {"kubeletVersion": "v0.0.1"}),
        ("phase", "Terminated"),
        ("images", [{"names": ["registry.example/evil:latest"], "sizeBytes": 1}]),
    ],
)
def test_other_status_fields_are_refused(
    kube: GfdCluster, pod: GfdPod, field: str, value: Any
) -> None:
    before = status_of(kube, pod.node)
    body = health_patch()
    body["status"][field] = value
    message = assert_refused(patch_status(kube, pod, pod.node, body))
    # The server fills allocatable from capacity when it has none: two fields then.
    assert f"of a node's status (not {field}" in message
    assert status_of(kube, pod.node) == before


@pytest.mark.parametrize(
    "metadata",
    [
        {"labels": {"nvidia.com/gpu.count": "8"}},
        {"labels": {"kubernetes.io/hostname": None}},
        {"annotations": {"nvidia.com/gfd.labels": "gpu.count"}},
        {"finalizers": ["example.com/hold"]},
    ],
    ids=["nvidia-label", "remove-label", "gfd-annotation", "finalizer"],
)
def test_metadata_through_status_is_refused(
    kube: GfdCluster, pod: GfdPod, metadata: dict[str, Any]
) -> None:
    # The status subresource lets metadata through (only spec is reset): even what
    # gfd may write through the node itself is refused here.
    before = kube.node_metadata(pod.node)
    assert_refused(patch_status(kube, pod, pod.node, {"metadata": metadata}, MERGE))
    after = kube.node_metadata(pod.node)
    assert (after["labels"], after.get("annotations"), after.get("finalizers")) == (
        before["labels"],
        before.get("annotations"),
        before.get("finalizers"),
    )


def test_managed_fields_through_status_are_left_by_the_server(
    kube: GfdCluster, pod: GfdPod
) -> None:
    # Unlike on the node itself (refused by gfd-node-labeler), an empty entry sent to
    # nodes/status does not reset field ownership: the server keeps the records as
    # they were, and the request changes nothing.
    before = kube.node_metadata(pod.node)["managedFields"]
    status, body = patch_status(kube, pod, pod.node, {"metadata": {"managedFields": [{}]}}, MERGE)
    assert status in (200, 403), body
    assert kube.node_metadata(pod.node)["managedFields"] == before


def test_spec_through_status_is_dropped_by_the_server(kube: GfdCluster, pod: GfdPod) -> None:
    # The server resets spec on a status update before admission: the request succeeds
    # and changes nothing. The policy's spec rule is a second line, never reached.
    before = kube.admin.get(f"/api/v1/nodes/{pod.node}")["spec"]
    status, body = patch_status(kube, pod, pod.node, {"spec": {"unschedulable": True}}, MERGE)
    assert status == 200, body
    assert kube.admin.get(f"/api/v1/nodes/{pod.node}")["spec"] == before


def test_status_through_the_node_itself_is_dropped(
    kube: GfdCluster, pod: GfdPod, busy_node: str
) -> None:
    # gfd's "patch nodes" meets gfd-node-labeler, which does not see status; the server
    # drops status changes sent to the node itself, so nothing of the status changes.
    before = status_of(kube, busy_node)
    body = {"status": {"conditions": [condition("Ready", "False", "KubeletNotReady")]}}
    status, reply = kube.as_gfd(pod, "PATCH", f"/api/v1/nodes/{busy_node}", body, content_type=SMP)
    assert status == 200, reply
    assert status_of(kube, busy_node) == before


def test_the_policy_names_every_status_field_the_server_has(kube: GfdCluster) -> None:
    # A field added to NodeStatus in a later Kubernetes would be writable through
    # nodes/status until the policy names it: this fails first.
    schema = kube.admin.get("/openapi/v3/api/v1")["components"]["schemas"]
    fields = set(schema["io.k8s.api.core.v1.NodeStatus"]["properties"]) - {"conditions"}
    assert fields == set(NODE_STATUS_FIELDS)
    conditions = schema["io.k8s.api.core.v1.NodeStatus"]["properties"]["conditions"]
    # Conditions merge by type: a patch of one entry leaves the others.
    assert conditions["x-kubernetes-patch-merge-key"] == "type"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


# --------------------------------------------------------------------- events


def node_event(kube: GfdCluster, about: str, **changes: Any) -> dict[str, Any]:
    """An Event as gfd makes it, about Node ``about``."""
    uid = kube.node_metadata(about)["uid"] if about else ""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{about}.{time.time_ns():x}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": about, "uid": uid},
        "reason": "GPULost",
        "message": "GPU 3 is lost",
        "type": "Warning",
        "source": {"component": "gfd", "host": about},
        "reportingComponent": "gfd",
        "reportingInstance": about,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    event.update(changes)
    return event


def test_gfd_may_create_an_event_about_its_node(kube: GfdCluster, pod: GfdPod) -> None:
    event = node_event(kube, pod.node)
    status, body = kube.as_gfd(pod, "POST", EVENTS, event)
    assert status == 201, body
    stored = kube.admin.get(f"{EVENTS}/{event['metadata']['name']}")
    assert stored["involvedObject"]["name"] == pod.node
    recovery = node_event(kube, pod.node, reason="GPUsHealthy", type="Normal", message="ok")
    assert kube.as_gfd(pod, "POST", EVENTS, recovery)[0] == 201


def test_an_event_about_a_node_goes_in_default_only(kube: GfdCluster, pod: GfdPod) -> None:
    # The server's own rule, which is why gfd's events go in default: an Event whose
    # involvedObject has no namespace (a Node, as the kubelet writes it) is valid only
    # in default (and, with eventTime, kube-system), whoever sends it.
    event = node_event(kube, pod.node)
    event["metadata"]["namespace"] = NAMESPACE
    status, body = kube.admin.request(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/events", event, ok=(422,)
    )
    assert status == 422, body
    assert "involvedObject.namespace" in body["message"]


@pytest.mark.parametrize("case", ["another-node", "a-pod", "related", "name", "host"])
def test_events_about_anything_else_are_refused(kube: GfdCluster, pod: GfdPod, case: str) -> None:
    other = kube.node()
    event = {
        "another-node": node_event(kube, other),
        "a-pod": node_event(
            kube,
            pod.node,
            involvedObject={
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "victim",
                "namespace": "default",
            },
        ),
        "related": node_event(
            kube,
            pod.node,
            related={"apiVersion": "v1", "kind": "Node", "name": other},
        ),
        "name": node_event(
            kube, pod.node, metadata={"name": f"{other}.{uuid.uuid4().hex}", "namespace": "default"}
        ),
        "host": node_event(kube, pod.node, source={"component": "gfd", "host": other}),
    }[case]
    assert_refused(kube.as_gfd(pod, "POST", EVENTS, event))
    assert kube.admin.request("GET", f"{EVENTS}/{event['metadata']['name']}", ok=(404,))[0] == 404


def test_events_in_another_namespace_are_refused_by_rbac(kube: GfdCluster, pod: GfdPod) -> None:
    event = node_event(kube, pod.node)
    for namespace in (NAMESPACE, "kube-system"):
        # A Node's Event there must name the namespace to be valid at all.
        event["metadata"]["namespace"] = event["involvedObject"]["namespace"] = namespace
        reply = kube.as_gfd(pod, "POST", f"/api/v1/namespaces/{namespace}/events", event)
        message = assert_refused(reply, by_policy=False)
        assert "cannot create resource" in message
    # Nor through events.k8s.io, which RBAC does not grant either.
    new_style = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.node}.{time.time_ns():x}"},
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": pod.node},
        "reason": "GPULost", "note": "x", "type": "Warning", "action": "Check",
        "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
        "reportingController": "gfd", "reportingInstance": pod.node,
    }  # fmt: skip
    reply = kube.as_gfd(pod, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", new_style)
    assert_refused(reply, by_policy=False)


def test_events_may_not_be_changed_or_deleted(kube: GfdCluster, pod: GfdPod) -> None:
    event = node_event(kube, pod.node)
    assert kube.as_gfd(pod, "POST", EVENTS, event)[0] == 201
    path = f"{EVENTS}/{event['metadata']['name']}"
    assert_refused(
        kube.as_gfd(pod, "PATCH", path, {"count": 2}, content_type=MERGE), by_policy=False
    )
    assert_refused(kube.as_gfd(pod, "DELETE", path), by_policy=False)


def test_events_from_a_node_bound_token_are_refused(kube: GfdCluster, node: str) -> None:
    token = kube.node_bound_token(node)
    message = assert_refused(kube.as_gfd(token, "POST", EVENTS, node_event(kube, node)))
    assert "only with a token bound to its Pod" in message
