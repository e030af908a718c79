"""``gpu.clique``: the NVLink fabric clique the node's GPUs belong to (GB200 NVL and alike).

This module owns when a node gets a clique label: only when every GPU is attached
to the fabric (registration ``completed`` with status SUCCESS and a cluster UUID
that is not all zero) and all GPUs agree on the cluster UUID and the clique id.
Anything less (a GPU still registering, a failed registration, GPUs in different
cliques) yields no label, so workloads never select a node on a partial fabric.
"""

from __future__ import annotations

from gfd.facts import FabricInfo, NodeFacts
from gfd.labels.labeler import FamilyLabeler

CLIQUE_KEY = "nvidia.com/gpu.clique"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
#: ``NVML_SUCCESS``: the fabric registration's status when it worked.
FABRIC_STATUS_SUCCESS = 0


def is_fabric_attached(fabric: FabricInfo) -> bool:
    """Whether a GPU has completed fabric registration with a real cluster UUID."""
    return (
        fabric.state == "completed"
        and fabric.status == FABRIC_STATUS_SUCCESS
        and fabric.cluster_uuid.lower() != ZERO_UUID
    )


def fabric_labels(facts: NodeFacts) -> dict[str, str]:
    """``gpu.clique=<cluster UUID>.<clique id>`` when every GPU is attached and all agree."""
    if not facts.gpus:
        return {}
    cliques: set[tuple[str, int]] = set()
    for gpu in facts.gpus:
        fabric = gpu.fabric
        if fabric is None or not is_fabric_attached(fabric):
            return {}
        cliques.add((fabric.cluster_uuid.lower(), fabric.clique_id))
    if len(cliques) != 1:
        return {}
    cluster_uuid, clique_id = cliques.pop()
    return {CLIQUE_KEY: f"{cluster_uuid}.{clique_id}"}


FABRIC_LABELER = FamilyLabeler("fabric clique", lambda inputs: fabric_labels(inputs.facts))
