"""The NodeFeature sink against the API servers.

Tests taking ``api`` run against the project's emulator and against kmock (see
:mod:`tests.kube.servers`); those taking ``emulator`` need what only the emulator does,
and each says why.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gfd.base.errors import SinkError, SinkPermanentError
from gfd.kube_api import KubeApiPermanentError, KubeClient, connect_kubernetes
from gfd.sinks import Publication
from gfd.sinks.nodefeature import NODE_NAME_LABEL, NodeFeatureSink
from tests.emulator import ApiServerEmulator, Fault, Principal
from tests.kube.conftest import FAST_RETRIES, NAMESPACE, NODE, POD
from tests.kube.servers import NODEFEATURES, ApiServer, writes

LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
OBJECT = f"nvidia-features-for-{NODE}"


def sink_for(client: KubeClient, stop: threading.Event, pod: str | None = POD) -> NodeFeatureSink:
    return NodeFeatureSink(
        client=client, node_name=NODE, namespace=NAMESPACE, pod_name=pod, stop=stop
    )


def test_creates_the_object_as_the_reference_does(
    api: ApiServer,
    api_client: KubeClient,
    api_cluster: dict[str, Any],
    stop: threading.Event,
) -> None:
    assert sink_for(api_client, stop).publish(Publication(LABELS)) is True
    stored = api.get(NODEFEATURES, OBJECT, NAMESPACE)
    assert stored is not None
    assert stored["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert stored["kind"] == "NodeFeature"
    assert stored["metadata"]["labels"] == {NODE_NAME_LABEL: NODE}
    assert stored["spec"] == {
        "labels": LABELS,
        "features": {"flags": {}, "attributes": {}, "instances": {}},
    }
    pod, daemonset = api_cluster["pod"]["metadata"], api_cluster["daemonset"]["metadata"]
    assert sorted(
        (r["kind"], r["name"], r["uid"]) for r in stored["metadata"]["ownerReferences"]
    ) == [
        ("DaemonSet", daemonset["name"], daemonset["uid"]),
        ("Pod", pod["name"], pod["uid"]),
    ]


def test_steady_state_is_one_cached_read_and_no_write(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(api_client, stop)
    sink.publish(Publication(LABELS))
    api.clear_log()
    for _ in range(3):
        assert sink.publish(Publication(LABELS, {"nvidia.com/gpu.topology": "{}"})) is False
    assert [(r.method, r.query) for r in api.requests] == [("GET", {"resourceVersion": "0"})] * 3


def test_changed_labels_replace_the_spec_with_an_optimistic_lock(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: gfd replaces the object with PUT, which kmock does not serve (404),
    # and kmock keeps no generation or resourceVersion.
    sink = sink_for(client, stop)
    sink.publish(Publication(LABELS))
    before = emulator.nodefeature(NAMESPACE, OBJECT)
    assert before is not None
    emulator.clear_log()
    assert sink.publish(Publication({"nvidia.com/gpu.count": "4"})) is True
    after = emulator.nodefeature(NAMESPACE, OBJECT)
    assert after is not None
    assert after["spec"]["labels"] == {"nvidia.com/gpu.count": "4"}
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["generation"] == 2
    (put,) = [r for r in emulator.requests if r.is_write]
    assert put.method == "PUT"
    assert put.body["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_conflicting_update_rereads_and_converges(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: a PUT, and a 409 from a stale resourceVersion (kmock has neither).
    sink = sink_for(client, stop)
    sink.publish(Publication(LABELS))

    def annotate(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("annotations", {})["edited-by"] = "someone"

    emulator.before(
        lambda api: api.edit_object("nodefeatures", OBJECT, NAMESPACE, mutate=annotate),
        method="PUT",
    )
    emulator.clear_log()
    assert sink.publish(Publication({"nvidia.com/gpu.count": "2"})) is True
    assert [(r.method, r.status) for r in emulator.requests] == [
        ("GET", 200),
        ("PUT", 409),
        ("GET", 200),
        ("PUT", 200),
    ]
    stored = emulator.nodefeature(NAMESPACE, OBJECT)
    assert stored is not None
    assert stored["spec"]["labels"] == {"nvidia.com/gpu.count": "2"}
    assert stored["metadata"]["annotations"] == {"edited-by": "someone"}


def test_a_deleted_object_is_recreated(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink = sink_for(api_client, stop)
    sink.publish(Publication(LABELS))
    api.delete(NODEFEATURES, OBJECT, NAMESPACE)
    api.clear_log()
    assert sink.publish(Publication(LABELS)) is True
    # kmock answers a create with 200, where the API server (and the emulator) say 201.
    created = 200 if api.name == "kmock" else 201
    assert [(r.method, r.status) for r in api.requests] == [("GET", 404), ("POST", created)]
    assert api.get(NODEFEATURES, OBJECT, NAMESPACE) is not None


def test_without_pod_name_there_are_no_owner_references(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink_for(api_client, stop, pod=None).publish(Publication(LABELS))
    stored = api.get(NODEFEATURES, OBJECT, NAMESPACE)
    assert stored is not None
    assert "ownerReferences" not in stored["metadata"]
    assert not [r for r in api.requests if "/pods/" in r.path]


def test_unknown_pod_is_a_permanent_error_naming_pod_name(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    with pytest.raises(SinkPermanentError, match=r"pod gpu-operator/nope not found.*POD_NAME"):
        sink_for(api_client, stop, pod="nope").publish(Publication(LABELS))
    assert writes(api) == []


def test_storms_converge(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: faults with nothing applied, and a connection dropped mid-body.
    emulator.inject(
        Fault(status=503, times=3),
        Fault(status=429, retry_after="0", times=2),
        Fault(drop=True, method="POST"),
    )
    sink = sink_for(client, stop)
    sink.publish(Publication(LABELS))
    # The dropped POST was applied; its retry answers 409 AlreadyExists, the sink
    # reads the object again and finds it as wanted.
    assert [r.status for r in emulator.requests if r.method == "POST"] == [201, 409]
    emulator.clear_log()
    assert sink.publish(Publication(LABELS)) is False
    assert emulator.count(writes=True) == 0
    stored = emulator.nodefeature(NAMESPACE, OBJECT)
    assert stored is not None and stored["spec"]["labels"] == LABELS


def test_missing_permission_is_reported_and_not_retried(
    emulator: ApiServerEmulator,
    cluster: dict[str, Any],
    kubeconfig: Path,
    stop: threading.Event,
) -> None:
    # Emulator only: kmock has no authorisation.
    emulator.set_token(
        "no-create", Principal("system:serviceaccount:gpu-operator:gfd", frozenset({("get", "*")}))
    )
    emulator.write_kubeconfig(kubeconfig, "no-create")
    client = connect_kubernetes(kubeconfig=str(kubeconfig), retry_policy=FAST_RETRIES)
    with pytest.raises(
        SinkPermanentError, match=r'HTTP 403.*cannot create resource "nodefeatures"'
    ):
        sink_for(client, stop).publish(Publication(LABELS))
    assert emulator.count(method="POST") == 1
    client.close()


def test_stop_during_backoff_interrupts(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    # Emulator only: an endless 503.
    emulator.inject(Fault(status=503, times=None))
    stop.set()
    with pytest.raises(SinkError, match="interrupted"):
        sink_for(client, stop).publish(Publication(LABELS))
    assert len(emulator.requests) == 1


def test_another_namespace_is_forbidden_as_by_a_namespaced_role(
    client: KubeClient, cluster: dict[str, Any], stop: threading.Event
) -> None:
    # Emulator only (kmock has no RBAC). gfd's Role binds it in its own namespace only (as the real server enforces;
    # tests/realkube/test_emulator_parity.py holds the emulator to it).
    sink = NodeFeatureSink(
        client=client, node_name=NODE, namespace="default", pod_name=None, stop=stop
    )
    with pytest.raises(KubeApiPermanentError) as refused:
        sink.publish(Publication(labels={"nvidia.com/gpu.count": "8"}))
    assert refused.value.status == 403
    assert 'in the namespace "default"' in str(refused.value)
