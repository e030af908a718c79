"""The NodeFeature sink on a real kube-apiserver with NFD's own CRDs, as gfd's DaemonSet
ServiceAccount with a pod-bound token: the object is created with its owners, updated
when the labels change, left alone (one read, no write) when they do not, and removed by
the real garbage collector once its DaemonSet and Pod are gone."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import pytest

from gfd.kube_api import KubeApiPermanentError
from gfd.sinks import Publication
from gfd.sinks.nodefeature import NODE_NAME_LABEL, NodeFeatureSink, nodefeature_name
from tests.controlplane import ControlPlane
from tests.deploy.manifests import NAMESPACE
from tests.realkube.cluster import GFD_USER, GfdCluster, GfdPod

pytestmark = [pytest.mark.oracle("kube"), pytest.mark.oracle("nfd")]

COLLECTION = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"
EIGHT = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
FOUR = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def sink_for(kube: GfdCluster, pod: GfdPod) -> contextlib.AbstractContextManager[NodeFeatureSink]:
    @contextlib.contextmanager
    def made() -> object:
        client = kube.client(pod.kubeconfig)
        try:
            yield NodeFeatureSink(
                client=client,
                node_name=pod.node,
                namespace=NAMESPACE,
                pod_name=pod.name,
                stop=threading.Event(),
            )
        finally:
            client.close()

    return made()  # type: ignore[return-value]


def test_created_updated_and_left_alone(kube: GfdCluster, pod: GfdPod) -> None:
    path = f"{COLLECTION}/{nodefeature_name(pod.node)}"
    with sink_for(kube, pod) as sink:
        assert sink.publish(Publication(EIGHT)) is True
        stored = kube.admin.get(path)
        assert stored["spec"]["labels"] == EIGHT
        assert stored["metadata"]["labels"][NODE_NAME_LABEL] == pod.node
        owners = {(o["kind"], o["name"], o["uid"]) for o in stored["metadata"]["ownerReferences"]}
        assert owners == {("Pod", pod.name, pod.uid), ("DaemonSet", "gfd", kube.daemonset_uid)}

        assert sink.publish(Publication(FOUR)) is True
        assert kube.admin.get(path)["spec"]["labels"] == FOUR

        mark = kube.plane.audit.mark()
        for _ in range(3):
            assert sink.publish(Publication(FOUR)) is False
    verbs = [
        (e["verb"], e["objectRef"]["resource"])
        for e in kube.plane.audit.events(mark, user=GFD_USER)
    ]
    assert verbs == [("get", "nodefeatures")] * 3


def test_garbage_collected_with_its_daemonset(
    kube: GfdCluster, garbage_collector: ControlPlane
) -> None:
    # A DaemonSet of its own, so that deleting it leaves the suite's one in place.
    name = kube.unique("gfd-gc")
    _, daemonset = kube.admin.request(
        "POST",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "gfd", "image": "gfd:test"}]},
                },
            },
        },
    )
    pod = kube.gfd_pod(kube.node(), daemonset=(name, daemonset["metadata"]["uid"]))
    path = f"{COLLECTION}/{nodefeature_name(pod.node)}"
    with sink_for(kube, pod) as sink:
        assert sink.publish(Publication(EIGHT)) is True
    kube.admin.delete(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{name}", propagation="Background"
    )
    pod_path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod.name}"
    # The collector deletes the Pod, gracefully: no kubelet runs here to confirm that the
    # containers stopped, so confirm it as the kubelet would (grace period 0).
    wait_until(lambda: "deletionTimestamp" in kube.admin.get(pod_path)["metadata"], "pod deleted")
    kube.admin.request("DELETE", pod_path, {"gracePeriodSeconds": 0}, ok=(404,))
    wait_until(lambda: kube.admin.request("GET", path, ok=(404,))[0] == 404, "NodeFeature gone")


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 45.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"garbage collector: not done after {timeout:.0f} s: {what}")
        time.sleep(0.2)


def test_the_default_namespace_is_refused_by_namespaced_rbac(kube: GfdCluster, pod: GfdPod) -> None:
    # Why gfd never falls back to "default": its Role is in its own namespace only.
    client = kube.client(pod.kubeconfig)
    sink = NodeFeatureSink(
        client=client,
        node_name=pod.node,
        namespace="default",
        pod_name=None,
        stop=threading.Event(),
    )
    try:
        with pytest.raises(KubeApiPermanentError) as refused:
            sink.publish(Publication(EIGHT))
    finally:
        client.close()
    assert refused.value.status == 403
