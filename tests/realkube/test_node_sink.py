"""The node sink on a real kube-apiserver, as gfd's DaemonSet ServiceAccount with a
pod-bound token: labels appear, a steady state costs one read and no write (counted in the
server's audit log), other writers' labels stay, new hardware relabels, and two agents
racing on one node converge."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from gfd.sinks import Publication
from gfd.sinks.kube import KubeClient
from gfd.sinks.node import (
    NFD_OWNERSHIP_ANNOTATION,
    OWNERSHIP_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    NodeSink,
)
from tests.realkube.cluster import GFD_USER, GfdCluster, GfdPod
from tests.reliability.agent_process import expected_labels

pytestmark = pytest.mark.oracle("kube")

TOPOLOGY = '{"gpus":8,"matrix":[["X","NV18"],["NV18","X"]]}'


@pytest.fixture(scope="module")
def h100_labels() -> dict[str, str]:
    return expected_labels("dgx-h100")


@pytest.fixture(scope="module")
def h200_labels() -> dict[str, str]:
    return expected_labels("hgx-h200")


@pytest.fixture
def client(kube: GfdCluster, pod: GfdPod) -> Iterator[KubeClient]:
    kube_client = kube.client(pod.kubeconfig)
    yield kube_client
    kube_client.close()


def sink_for(client: KubeClient, node: str) -> NodeSink:
    return NodeSink(client=client, node_name=node, stop=threading.Event())


def node_requests(kube: GfdCluster, since: int, node: str) -> list[tuple[str, int]]:
    """(verb, status) of gfd's requests to ``node`` after ``since``, from the audit log."""
    return [
        (event["verb"], event["responseStatus"]["code"])
        for event in kube.plane.audit.events(since, user=GFD_USER)
        if event.get("objectRef", {}).get("resource") == "nodes"
        and event["objectRef"].get("name") == node
    ]


def test_labels_and_annotations_appear(
    kube: GfdCluster, node: str, client: KubeClient, h100_labels: dict[str, str]
) -> None:
    sink = sink_for(client, node)
    assert sink.publish(Publication(h100_labels, {TOPOLOGY_ANNOTATION: TOPOLOGY})) is True
    labels = kube.labels(node)
    assert {k: labels[k] for k in h100_labels} == h100_labels
    annotations = kube.annotations(node)
    assert annotations[OWNERSHIP_ANNOTATION] == ",".join(sorted(h100_labels))
    assert annotations[TOPOLOGY_ANNOTATION] == TOPOLOGY


def test_steady_state_is_one_read_and_no_write_per_cycle(
    kube: GfdCluster, node: str, client: KubeClient, h100_labels: dict[str, str]
) -> None:
    sink = sink_for(client, node)
    mark = kube.plane.audit.mark()
    assert sink.publish(Publication(h100_labels)) is True
    assert node_requests(kube, mark, node) == [("get", 200), ("patch", 200)]
    cycles = 5
    mark = kube.plane.audit.mark()
    for _ in range(cycles):
        assert sink.publish(Publication(h100_labels)) is False
    assert node_requests(kube, mark, node) == [("get", 200)] * cycles


def test_foreign_and_nfd_owned_labels_are_left_alone(
    kube: GfdCluster, client: KubeClient, h100_labels: dict[str, str]
) -> None:
    product = "nvidia.com/gpu.product"
    node = kube.node(
        labels={
            "example.com/team": "vision",
            "nvidia.com/gpu.deploy.driver": "true",
            product: "set-by-nfd",
            "feature.node.kubernetes.io/pci-10de.present": "true",
        },
        annotations={NFD_OWNERSHIP_ANNOTATION: f"pci-10de.present,{product}"},
    )
    with contextlib.closing(kube.client(kube.gfd_pod(node).kubeconfig)) as own:
        sink = sink_for(own, node)
        assert sink.publish(Publication(h100_labels)) is True
        after = kube.labels(node)
        assert after["example.com/team"] == "vision"
        assert after["nvidia.com/gpu.deploy.driver"] == "true"
        assert after[product] == "set-by-nfd"
        assert product not in kube.annotations(node)[OWNERSHIP_ANNOTATION].split(",")
        # Publishing nothing removes gfd's own labels, and only those.
        assert sink.publish(Publication({})) is True
        final = kube.labels(node)
    assert not (set(h100_labels) - {product}) & set(final)
    assert final["example.com/team"] == "vision"
    assert final["nvidia.com/gpu.deploy.driver"] == "true"
    assert final[product] == "set-by-nfd"
    assert final["feature.node.kubernetes.io/pci-10de.present"] == "true"
