"""The node sink on a real kube-apiserver, as gfd's DaemonSet ServiceAccount with a
pod-bound token: labels appear, a steady state costs one read and no write (counted in the
server's audit log), other writers' labels stay, new hardware relabels, and two agents
racing on one node converge."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from gfd.kube_api import KubeClient
from gfd.sinks import Publication
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


def test_new_hardware_relabels(
    kube: GfdCluster,
    node: str,
    client: KubeClient,
    h100_labels: dict[str, str],
    h200_labels: dict[str, str],
) -> None:
    assert h100_labels != h200_labels
    sink = sink_for(client, node)
    sink.publish(Publication(h100_labels))
    assert sink.publish(Publication(h200_labels)) is True
    labels = kube.labels(node)
    gfd_keys = {k for k in labels if k.startswith("nvidia.com/")}
    assert gfd_keys == set(h200_labels)
    assert {k: labels[k] for k in h200_labels} == h200_labels
    assert kube.annotations(node)[OWNERSHIP_ANNOTATION] == ",".join(sorted(h200_labels))


def test_two_agents_racing_on_one_node_converge(
    kube: GfdCluster, h100_labels: dict[str, str], h200_labels: dict[str, str]
) -> None:
    """An old and a new gfd pod on one node (a rolling update), each sure of its own
    hardware view, and a third writer changing foreign labels all the while: every
    write that removes a key carries a precondition (the read resourceVersion, then,
    after a 409, JSON Patch tests of the keys it depends on, whose failures answer 422),
    so the real server's conflicts (its cached reads are stale after each write, and the
    two agents rewrite each other's keys) are resolved, nothing fails, and the node ends
    as the last publication says."""
    node = kube.node(
        labels={"nvidia.com/gpu.stale-key": "1"},
        annotations={OWNERSHIP_ANNOTATION: "nvidia.com/gpu.stale-key"},
    )
    clients = [kube.client(kube.gfd_pod(node).kubeconfig) for _ in range(2)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def agent(client: KubeClient, first: dict[str, str]) -> None:
        sink = sink_for(client, node)
        try:
            barrier.wait()
            for round_ in range(12):
                sink.publish(Publication(first if round_ % 2 == 0 else h200_labels))
            sink.publish(Publication(h200_labels))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def bystander() -> None:
        barrier.wait()
        for round_ in range(12):
            kube.admin.request(
                "PATCH",
                f"/api/v1/nodes/{node}",
                {"metadata": {"labels": {"example.com/round": str(round_)}}},
                content_type="application/merge-patch+json",
            )

    threads = [
        threading.Thread(target=agent, args=(clients[0], h100_labels)),
        threading.Thread(target=agent, args=(clients[1], h200_labels)),
        threading.Thread(target=bystander),
    ]
    mark = kube.plane.audit.mark()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for client in clients:
        client.close()
    assert not errors, errors
    labels = kube.labels(node)
    assert {k for k in labels if k.startswith("nvidia.com/")} == set(h200_labels)
    assert {k: labels[k] for k in h200_labels} == h200_labels
    assert labels["example.com/round"] == "11"
    assert kube.annotations(node)[OWNERSHIP_ANNOTATION] == ",".join(sorted(h200_labels))
    statuses = [code for _, code in node_requests(kube, mark, node)]
    assert set(statuses) <= {200, 409, 422}, statuses


def test_a_writer_as_fast_as_it_can_never_fails_gfd(
    kube: GfdCluster, h100_labels: dict[str, str]
) -> None:
    """Issue 25 on the real server: eight publications by fresh sinks (as one-shot runs
    are), alternating two machines so that every second one removes labels, while
    another writer patches an unrelated label as fast as it can. Every publication
    succeeds; the node ends with exactly the second machine's labels and the writer's
    last value. A first attempt that carries the read resourceVersion may answer 409; the
    guarded retry after it is not disturbed by the writer."""
    fewer = expected_labels("t4-single")
    assert set(fewer) < set(h100_labels)
    node = kube.node()
    done = threading.Event()
    last = {"value": 0}

    def bystander() -> None:
        n = 0
        while not done.is_set():
            n += 1
            kube.admin.request(
                "PATCH",
                f"/api/v1/nodes/{node}",
                {"metadata": {"labels": {"example.com/busy": str(n)}}},
                content_type="application/merge-patch+json",
            )
            last["value"] = n

    writer = threading.Thread(target=bystander, daemon=True)
    mark = kube.plane.audit.mark()
    writer.start()
    try:
        for run in range(8):
            with contextlib.closing(kube.client(kube.gfd_pod(node).kubeconfig)) as own:
                assert sink_for(own, node).publish(
                    Publication(h100_labels if run % 2 == 0 else fewer)
                )
    finally:
        done.set()
        writer.join(timeout=60)
    labels = kube.labels(node)
    assert {k for k in labels if k.startswith("nvidia.com/")} == set(fewer)
    assert {k: labels[k] for k in fewer} == fewer
    assert labels["example.com/busy"] == str(last["value"])
    assert kube.annotations(node)[OWNERSHIP_ANNOTATION] == ",".join(sorted(fewer))
    statuses = [code for verb, code in node_requests(kube, mark, node) if verb == "patch"]
    assert set(statuses) <= {200, 409, 422}, statuses
    print(f"\nreal server, busy node: gfd's patches answered {sorted(statuses)}")


def test_a_label_set_by_hand_is_adopted_changed_and_removed(
    kube: GfdCluster, h100_labels: dict[str, str]
) -> None:
    """kubectl label leaves a managedFields entry owning just that label; when gfd takes
    the label over, the server drops the entry, which the node policy must allow."""
    node = kube.node()
    kube.admin.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"labels": {"nvidia.com/gpu.count": "2"}}},
        content_type="application/merge-patch+json",
        query={"fieldManager": "kubectl-label"},
    )
    with contextlib.closing(kube.client(kube.gfd_pod(node).kubeconfig)) as own:
        sink = sink_for(own, node)
        assert sink.publish(Publication(h100_labels)) is True
        assert kube.labels(node)["nvidia.com/gpu.count"] == h100_labels["nvidia.com/gpu.count"]
        managers = {e["manager"] for e in kube.node_metadata(node)["managedFields"]}
        assert "kubectl-label" not in managers
        without = {k: v for k, v in h100_labels.items() if k != "nvidia.com/gpu.count"}
        assert sink.publish(Publication(without)) is True
    assert "nvidia.com/gpu.count" not in kube.labels(node)
