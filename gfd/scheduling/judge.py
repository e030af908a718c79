"""One verdict per node for one pod, and the summary line in the scheduler's shape.

The verdict is kube-scheduler's feasibility (``fits``): the pod fits a node when the
filters gfd judges all pass (:mod:`gfd.scheduling.rules`, and ``NodeResourcesFit``
here: each requested resource against allocatable less what the bound pods request, and
the pod count). Unlike the scheduler, it names every failing rule of every node, with
what the node has and what to do, and tells apart what the scheduler words alike: a
GPU resource the node does not offer at all (MIG, a sharing rename, no device plugin,
the DRA driver) from one whose GPUs are all in use. The filters gfd does not judge are
named on the verdict (``not_judged``), never passed silently. The CUDA check comes
after: a pod that fits may still fail to start (:mod:`gfd.scheduling.cuda`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gfd.base.errors import ConfigError
from gfd.base.frozen import frozen_dataclass
from gfd.health.condition import CONDITION_TYPE
from gfd.health.taint import TAINT_KEY
from gfd.scheduling.cluster import Cluster, NodeUsage, condition, is_gpu_node
from gfd.scheduling.cuda import CudaVerdict, judge_cuda
from gfd.scheduling.quantity import parse_quantity, scheduler_units, show_units
from gfd.scheduling.rules import (
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    Miss,
    affinity_misses,
    named_nodes,
    prefilter_misses,
    taint_misses,
)
from gfd.scheduling.workload import Workload, pod_requests

#: The scheduler's filters in the order it runs them; a node's first failing one is what
#: the scheduler's own message counts.
FILTER_ORDER = (
    "PreFilter",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
)
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
DRA_DEVICE_CLASS = "gpu.nvidia.com"


@frozen_dataclass
class NodeVerdict:
    """Whether the pod fits one node, every reason when not, and the CUDA check."""

    node: str
    gpu_node: bool
    fits: bool
    misses: tuple[Miss, ...]
    #: What the verdict does not settle on this node (a Ready node is assumed, say).
    notes: tuple[str, ...]
    cuda: CudaVerdict | None

    @property
    def runs(self) -> bool:
        """Fits, and its CUDA (when one is asked) is there."""
        return self.fits and (self.cuda is None or self.cuda.ok)


@frozen_dataclass
class Explanation:
    """The verdicts for one pod, GPU nodes first, and what was not judged."""

    workload: Workload
    requests: Mapping[str, int]
    verdicts: tuple[NodeVerdict, ...]
    not_judged: tuple[str, ...]
    needed_cuda: tuple[int, int] | None
    cuda_source: str
    #: Nodes left out (not GPU nodes, without --all-nodes).
    left_out: int


def _allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    name = node["metadata"]["name"]
    units: dict[str, int] = {}
    for resource, value in node["status"]["allocatable"].items():
        try:
            units[resource] = scheduler_units(
                resource, parse_quantity(value, f"node {name}: allocatable {resource}")
            )
        except ConfigError:
            units[resource] = 0
    return units


def _health_message(node: Mapping[str, Any]) -> str | None:
    health = condition(node, CONDITION_TYPE)
    if health is None or health.get("status") == "True":
        return None
    return f"{health.get('reason', '')}: {health.get('message', '')}".strip(": ")


def _absent(resource: str, node: Mapping[str, Any], cluster: Cluster) -> tuple[str, str]:
    """Why the node offers no ``resource`` at all, and what to do (detail, fix)."""
    name = node["metadata"]["name"]
    labels = node["metadata"]["labels"]
    offered = sorted(r for r in node["status"]["allocatable"] if r.startswith("nvidia.com/"))
    shown = ", ".join(f"{r}: {node['status']['allocatable'][r]}" for r in offered)
    dra = cluster.dra_nodes is not None and name in cluster.dra_nodes
    if resource.startswith("nvidia.com/"):
        migs = [r for r in offered if r.startswith(MIG_RESOURCE_PREFIX)]
        if resource == GPU_RESOURCE and migs:
            return (
                f"the node offers no {resource}: its GPUs are MIG-partitioned "
                f"(mig.strategy={labels.get('nvidia.com/mig.strategy', 'mixed')}) and it "
                f"offers {shown}",
                f"request one of {', '.join(migs)} instead of {resource}",
            )
        if resource == GPU_RESOURCE and SHARED_GPU_RESOURCE in offered:
            return (
                f"the node offers no {resource}: its GPUs are shared under the name "
                f"{SHARED_GPU_RESOURCE} (the device plugin's sharing renameByDefault)",
                f"request {SHARED_GPU_RESOURCE}",
            )
        if resource == SHARED_GPU_RESOURCE and GPU_RESOURCE in offered:
            return (
                f"the node offers no {resource}: its GPUs are offered as {GPU_RESOURCE} "
                "(shared without a rename, or not shared)",
                f"request {GPU_RESOURCE}",
            )
        if resource.startswith(MIG_RESOURCE_PREFIX) and offered:
            return (
                f"the node offers no {resource}; it offers {shown}"
                + (
                    " (mig.strategy=single: MIG devices are offered as nvidia.com/gpu)"
                    if labels.get("nvidia.com/mig.strategy") == "single"
                    else ""
                ),
                "request a resource this node offers, or repartition its GPUs "
                "(NVIDIA's MIG manager)",
            )
        if dra:
            return (
                f"the node offers no {resource}: NVIDIA's DRA driver ({DRA_DEVICE_CLASS}) "
                "hands out its GPUs (it has the driver's ResourceSlices)",
                f"ask through a ResourceClaim of device class {DRA_DEVICE_CLASS}, not {resource}",
            )
        if is_gpu_node(node):
            health = _health_message(node)
            said = (
                f"; gfd's {CONDITION_TYPE} says {health!r}"
                if health and "DevicePluginMissing" in health
                else ""
            )
            return (
                f"the node has GPUs (gfd's labels) but offers no {resource}: no device "
                f"plugin is registered{said}",
                "check NVIDIA's device plugin pod on this node (kubectl get pods -A -o wide "
                f"--field-selector spec.nodeName={name}); gfd doctor tells more",
            )
        return (
            f"the node offers no {resource}: it is not a GPU node (no gfd GPU labels)",
            "run the pod where GPUs are (gfd select writes the affinity)",
        )
    return (f"the node offers no {resource}", "request what the node offers")


def _resource_misses(
    requests: Mapping[str, int], node: Mapping[str, Any], usage: NodeUsage, cluster: Cluster
) -> list[Miss]:
    allocatable = _allocatable(node)
    misses: list[Miss] = []
    if usage.pods + 1 > allocatable.get("pods", 0):
        misses.append(
            Miss(
                "NodeResourcesFit",
                "Too many pods",
                f"the node takes {allocatable.get('pods', 0)} pods and has {usage.pods}",
                "run it on another node",
            )
        )
    for resource, want in requests.items():
        if want <= 0 or resource in cluster.unknown_resources:
            continue
        have = allocatable.get(resource, 0)
        used = usage.requested.get(resource, 0)
        if want <= have - used:
            continue
        if resource not in node["status"]["allocatable"] or have == 0:
            detail, fix = _absent(resource, node, cluster)
        else:
            holders = usage.holders.get(resource, [])
            held = (
                " ("
                + ", ".join(f"{pod}: {show_units(resource, n)}" for n, pod in holders)
                + (", …" if len(holders) < usage.pods and holders else "")
                + ")"
                if holders
                else ""
            )
            detail = (
                f"asks {show_units(resource, want)} {resource}; the node has "
                f"{show_units(resource, have)}, pods bound there request "
                f"{show_units(resource, used)}{held}: {show_units(resource, max(have - used, 0))} free"
            )
            fix = (
                "every GPU here is in use: wait, or free one (the scheduler's message is "
                "the same as for a node without a device plugin)"
                if resource.startswith("nvidia.com/")
                else f"ask for less {resource}, or run it where more is free"
            )
        misses.append(Miss("NodeResourcesFit", f"Insufficient {resource}", detail, fix))
    return misses


def _not_ready_note(node: Mapping[str, Any]) -> str | None:
    ready = condition(node, "Ready")
    status = ready.get("status") if ready else "Unknown"
    if status == "True":
        return None
    tainted = any(
        taint.get("key") in (NOT_READY_TAINT, UNREACHABLE_TAINT) for taint in node["spec"]["taints"]
    )
    if tainted:
        return None  # the taint is the reason, and says so
    return (
        f"the node is not Ready (Ready={status}) but has no not-ready taint yet: the "
        "scheduler may place the pod, and its kubelet will not start it until it is Ready"
    )


def not_judged_filters(spec: Mapping[str, Any], cluster: Cluster) -> list[str]:
    """The filters this pod meets that gfd does not judge (named, never passed)."""
    found: list[str] = []
    affinity = spec.get("affinity") or {}
    if affinity.get("podAffinity") or affinity.get("podAntiAffinity"):
        found.append("InterPodAffinity (the pod's podAffinity/podAntiAffinity)")
    if spec.get("topologySpreadConstraints"):
        found.append("PodTopologySpread (topologySpreadConstraints)")
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    if any(
        port.get("hostPort")
        for container in containers
        for port in (container.get("ports") or [])
        if isinstance(port, Mapping)
    ):
        found.append("NodePorts (a hostPort)")
    if any(
        isinstance(volume, Mapping) and ("persistentVolumeClaim" in volume or "ephemeral" in volume)
        for volume in spec.get("volumes") or []
    ):
        found.append("VolumeBinding, VolumeZone, NodeVolumeLimits (persistent volumes)")
    if spec.get("resourceClaims"):
        known = (
            "nodes with NVIDIA's DRA driver's ResourceSlices: "
            + (", ".join(sorted(cluster.dra_nodes)) or "none")
            if cluster.dra_nodes is not None
            else "the ResourceSlices were not read"
        )
        found.append(f"DynamicResources (resourceClaims; {known})")
    if spec.get("schedulingGates"):
        gates = ", ".join(
            str(g.get("name")) for g in spec["schedulingGates"] if isinstance(g, Mapping)
        )
        found.append(f"schedulingGates ({gates}): the scheduler waits until they are removed")
    asked_unknown = [r for r in cluster.unknown_resources if r in pod_requests(spec)]
    if asked_unknown:
        found.append(
            f"NodeResourcesFit for {', '.join(asked_unknown)} ({cluster.source} does not "
            "tell what the node offers of them)"
        )
    if spec.get("nodeName"):
        found.append(f"spec.nodeName={spec['nodeName']}: the pod is bound without the scheduler")
    return found


def judge_node(
    workload: Workload,
    requests: Mapping[str, int],
    node: Mapping[str, Any],
    cluster: Cluster,
    needed_cuda: tuple[int, int] | None,
    cuda_requirement: str | None = None,
    named: set[str] | None = None,
) -> NodeVerdict:
    spec = workload.spec
    name = node["metadata"]["name"]
    misses = prefilter_misses(named, name)
    misses += taint_misses(spec, node, health_taint=TAINT_KEY, why=_health_message(node))
    misses += affinity_misses(spec, node)
    misses += _resource_misses(requests, node, cluster.usage.get(name, NodeUsage()), cluster)
    misses.sort(key=lambda miss: FILTER_ORDER.index(miss.filter))
    note = _not_ready_note(node)
    cuda = (
        judge_cuda(needed_cuda, node["metadata"]["labels"], cuda_requirement)
        if needed_cuda
        else None
    )
    return NodeVerdict(
        node=name,
        gpu_node=is_gpu_node(node),
        fits=not misses,
        misses=tuple(misses),
        notes=(note,) if note else (),
        cuda=cuda,
    )


def explain(
    workload: Workload,
    cluster: Cluster,
    *,
    needed_cuda: tuple[int, int] | None = None,
    cuda_source: str = "",
    cuda_requirement: str | None = None,
    all_nodes: bool = False,
) -> Explanation:
    """Judge ``workload`` against every node of ``cluster`` (GPU nodes only, unless
    ``all_nodes``, or unless the pod asks for no GPU resource)."""
    requests = pod_requests(workload.spec, workload.title)
    wants_gpu = any(r.startswith("nvidia.com/") and n > 0 for r, n in requests.items())
    named = named_nodes(workload.spec)
    verdicts = [
        judge_node(workload, requests, node, cluster, needed_cuda, cuda_requirement, named)
        for node in cluster.nodes
    ]
    shown = [v for v in verdicts if all_nodes or v.gpu_node or not wants_gpu]
    shown.sort(key=lambda v: (not v.gpu_node, v.node))
    return Explanation(
        workload=workload,
        requests=requests,
        verdicts=tuple(shown),
        not_judged=tuple(not_judged_filters(workload.spec, cluster)),
        needed_cuda=needed_cuda,
        cuda_source=cuda_source,
        left_out=len(verdicts) - len(shown),
    )


def summary_line(explanation: Explanation, total_nodes: int | None = None) -> str:
    """The scheduler's message, with the nodes named: ``0/3 nodes are available: 1
    node(s) had untolerated taint {k: v} (gpu-2), 2 Insufficient nvidia.com/gpu (gpu-1,
    gpu-3).`` Each node is counted under its first failing filter's reasons, as the
    scheduler counts it; nodes left out count as not matching."""
    verdicts = explanation.verdicts
    total = len(verdicts) + explanation.left_out if total_nodes is None else total_nodes
    fitting = [v.node for v in verdicts if v.fits]
    reasons: dict[str, list[str]] = {}
    for verdict in verdicts:
        if verdict.fits:
            continue
        first = verdict.misses[0].filter
        for miss in verdict.misses:
            if miss.filter == first and verdict.node not in reasons.setdefault(miss.reason, []):
                reasons[miss.reason].append(verdict.node)
    parts = sorted(f"{len(nodes)} {reason} ({_names(nodes)})" for reason, nodes in reasons.items())
    if explanation.left_out:
        parts.append(f"{explanation.left_out} not GPU nodes (not shown; --all-nodes shows them)")
    head = f"{len(fitting)}/{total} nodes are available"
    if fitting:
        head += f" ({_names(fitting)})"
    return head + (": " + ", ".join(parts) if parts else "") + "."


def _names(nodes: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(nodes[:most])
    return shown + (f", and {len(nodes) - most} more" if len(nodes) > most else "")
