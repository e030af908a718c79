"""Topology labels: how the GPUs of a node are connected, for affinity rules.

This module owns the ``nvidia.com/gpu.interconnect`` family of labels (documented
in ``docs/topology.md``). It is a pure function of a built
:class:`~gfd.topology.Topology`; every value is a valid Kubernetes label value
(lower case words or decimal numbers). A node with no GPU gets no topology labels.

The agent builds the topology once per cycle (with the C builder, whose failure it
withholds and counts) and keeps the matrix annotation; :data:`TOPOLOGY_LABELER` places
the labels it derived with :func:`topology_labels` in the composition's order.
"""

from __future__ import annotations

from gfd.labels.families import GFD_NAMESPACE
from gfd.labels.labeler import FamilyLabeler
from gfd.topology import Topology

#: Label value for a PCIe level NVML did not report (``N/A`` in the matrix).
UNKNOWN_LEVEL = "unknown"
#: ``gpu.pcie.worst`` when every GPU pair is connected by NVLink.
NO_PCIE_PAIR = "none"


def topology_labels(topology: Topology) -> dict[str, str]:
    """Interconnect labels of ``topology`` (empty for a node without GPUs)."""
    n = topology.gpu_count
    if n == 0:
        return {}
    summary = topology.summary
    largest = max((len(domain.gpus) for domain in topology.domains), default=0)
    labels = {
        "gpu.interconnect": summary.interconnect,
        "gpu.nvlink-domains": str(len(topology.domains)),
        "gpu.nvlink.largest-domain": str(largest),
    }
    if summary.min_nvlinks is not None:
        labels["gpu.nvlink.min-links"] = str(summary.min_nvlinks)
        labels["gpu.pcie.worst"] = _level_value(summary.pcie_worst)
    if summary.numa_nodes:
        labels["gpu.numa-nodes"] = str(len(summary.numa_nodes))
        labels["gpu.numa.max-gpus"] = str(max(count for _, count in summary.gpus_per_numa_node))
    return {GFD_NAMESPACE + key: value for key, value in sorted(labels.items())}


def _level_value(level: str | None) -> str:
    if level is None:
        return NO_PCIE_PAIR
    if level == "N/A":
        return UNKNOWN_LEVEL
    return level.lower()


TOPOLOGY_LABELER = FamilyLabeler("topology", lambda inputs: inputs.topology_labels)
