"""The nodes a pod could go to, and what the pods already bound to each request.

Only what the judgement reads is kept of each Node (labels, taints, the cordon,
allocatable, the Ready and ``GPUHealthy`` conditions), and of each bound pod only its
requests, summed per node: 20,000 pods cost a few numbers per node, not 20,000 objects.
The objects come from a list file (``kubectl get nodes,pods -A -o json``; ResourceSlices
too where it has them) or from the API server a page at a time (``limit``/``continue``),
the pods filtered by the server to those bound and not finished (the scheduler's own
view: a Succeeded or Failed pod holds nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gfd.base.errors import ConfigError
from gfd.health.condition import CONDITION_TYPE
from gfd.health.dra_node import DRA_DRIVER
from gfd.kube_api.errors import KubeApiPermanentError
from gfd.scheduling.workload import pod_requests

if TYPE_CHECKING:
    from gfd.kube_api import KubeClient

#: Items per page of a list from the API server.
LIST_PAGE = 500
#: How many of the pods bound to a node are named for one resource they hold.
NAMED_HOLDERS = 3
FINISHED_PHASES = ("Succeeded", "Failed")
#: The pods that hold resources: bound to a node, not finished (a field selector).
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"


@dataclass
class NodeUsage:
    """What the pods bound to one node request together."""

    pods: int = 0
    requested: dict[str, int] = field(default_factory=dict)
    #: Per extended resource, the largest holders: (units, "namespace/name").
    holders: dict[str, list[tuple[int, str]]] = field(default_factory=dict)

    def add(self, pod_name: str, requests: Mapping[str, int]) -> None:
        self.pods += 1
        for name, units in requests.items():
            self.requested[name] = self.requested.get(name, 0) + units
            if "/" in name and units:
                held = self.holders.setdefault(name, [])
                held.append((units, pod_name))
                held.sort(key=lambda item: (-item[0], item[1]))
                del held[NAMED_HOLDERS:]


@dataclass
class Cluster:
    """The nodes (trimmed), the use of each, and the nodes with the DRA driver's slices."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, NodeUsage] = field(default_factory=dict)
    #: Node names with a ResourceSlice of NVIDIA's DRA driver; None: not known.
    dra_nodes: set[str] | None = None
    source: str = ""
    #: Resources the nodes' allocatable does not tell (a simulated node's CPUs): not judged.
    unknown_resources: tuple[str, ...] = ()
    #: The pod being explained (``namespace/name``), if it is in the cluster: its own
    #: requests do not count against the node it is bound to.
    exclude: str = ""

    def add_node(self, node: Mapping[str, Any]) -> None:
        self.nodes.append(trim_node(node))

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        spec = pod.get("spec") or {}
        node_name = spec.get("nodeName") if isinstance(spec, Mapping) else None
        phase = (pod.get("status") or {}).get("phase")
        if not node_name or phase in FINISHED_PHASES:
            return
        metadata = pod.get("metadata") or {}
        name = f"{metadata.get('namespace', 'default')}/{metadata.get('name', '?')}"
        if name == self.exclude:
            return
        try:
            requests = pod_requests(spec, f"pod {name}")
        except ConfigError:
            return  # the API server admitted it; a quantity gfd cannot read counts as none
        self.usage.setdefault(str(node_name), NodeUsage()).add(name, requests)

    def add_resource_slice(self, resource_slice: Mapping[str, Any]) -> None:
        spec = resource_slice.get("spec") or {}
        if spec.get("driver") == DRA_DRIVER and spec.get("nodeName"):
            if self.dra_nodes is None:
                self.dra_nodes = set()
            self.dra_nodes.add(str(spec["nodeName"]))


def trim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """What the judgement reads of a Node."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    conditions = [
        condition
        for condition in status.get("conditions") or []
        if isinstance(condition, Mapping) and condition.get("type") in ("Ready", CONDITION_TYPE)
    ]
    return {
        "metadata": {
            "name": str(metadata.get("name", "")),
            "labels": dict(metadata.get("labels") or {}),
        },
        "spec": {
            "unschedulable": bool(spec.get("unschedulable")),
            "taints": list(spec.get("taints") or []),
        },
        "status": {
            "allocatable": dict(status.get("allocatable") or {}),
            "conditions": conditions,
        },
    }


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    """A node gfd labelled with GPUs, or whose kubelet offers an ``nvidia.com/`` resource."""
    labels = node["metadata"]["labels"]
    count = labels.get(GPU_COUNT_LABEL, "0")
    if count.isdigit() and int(count) > 0:
        return True
    return any(name.startswith("nvidia.com/") for name in node["status"]["allocatable"])


def condition(node: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The node's condition of type ``kind`` (a trimmed node's), if it has one."""
    found: Mapping[str, Any]
    for found in node["status"]["conditions"]:
        if found.get("type") == kind:
            return found
    return None


def cluster_from_list(document: Any, source: str, *, exclude: str = "") -> Cluster:
    """A cluster from ``kubectl get nodes,pods -A -o json`` (a ``List``); ``exclude``:
    the pod being explained."""
    if not isinstance(document, Mapping) or not isinstance(document.get("items"), list):
        raise ConfigError(
            f"{source}: not a Kubernetes List with items (save one with "
            "kubectl get nodes,pods -A -o json > FILE)"
        )
    cluster = Cluster(source=source, exclude=exclude)
    kinds = set()
    for item in document["items"]:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("kind")
        kinds.add(kind)
        if kind == "Node":
            cluster.add_node(item)
        elif kind == "Pod":
            cluster.add_pod(item)
        elif kind == "ResourceSlice":
            cluster.add_resource_slice(item)
    if "Node" not in kinds:
        raise ConfigError(
            f"{source}: the List has no Node (save it with kubectl get nodes,pods -A -o json)"
        )
    if "ResourceSlice" in kinds and cluster.dra_nodes is None:
        cluster.dra_nodes = set()
    return cluster


def find_pod(document: Mapping[str, Any], namespace: str, name: str) -> Mapping[str, Any] | None:
    """The Pod ``namespace/name`` among a List's items."""
    for item in document.get("items") or []:
        if isinstance(item, Mapping) and item.get("kind") == "Pod":
            metadata = item.get("metadata") or {}
            if metadata.get("namespace", "default") == namespace and metadata.get("name") == name:
                pod: Mapping[str, Any] = item
                return pod
    return None


def pages(
    client: KubeClient, path: str, stop: threading.Event, query: Mapping[str, str] | None = None
) -> Iterator[Mapping[str, Any]]:
    """Every item of a list, read ``LIST_PAGE`` at a time."""
    token = ""
    while True:
        page_query = {"limit": str(LIST_PAGE), **(query or {})}
        if token:
            page_query["continue"] = token
        response = client.request(
            "GET", path, stop=stop, deadline=client.deadline(), query=page_query
        )
        listing = response.json_object(f"the list {path}")
        yield from (item for item in listing.get("items") or [] if isinstance(item, Mapping))
        metadata = listing.get("metadata") or {}
        token = str(metadata.get("continue") or "") if isinstance(metadata, Mapping) else ""
        if not token:
            return


def cluster_from_api(client: KubeClient, stop: threading.Event, *, exclude: str = "") -> Cluster:
    """The cluster as the API server has it now: Nodes, bound pods, the DRA driver's
    slices; ``exclude``: the pod being explained."""
    cluster = Cluster(source=client.server, exclude=exclude)
    for node in pages(client, "/api/v1/nodes", stop):
        cluster.add_node(node)
    for pod in pages(client, "/api/v1/pods", stop, {"fieldSelector": BOUND_PODS}):
        cluster.add_pod(pod)
    try:
        slices: Iterable[Mapping[str, Any]] = list(
            pages(
                client,
                "/apis/resource.k8s.io/v1/resourceslices",
                stop,
                {"fieldSelector": f"spec.driver={DRA_DRIVER}"},
            )
        )
    except KubeApiPermanentError:
        slices = ()  # no resource.k8s.io/v1 here, or no right to list it: not known
    else:
        cluster.dra_nodes = set()
    for resource_slice in slices:
        cluster.add_resource_slice(resource_slice)
    return cluster
