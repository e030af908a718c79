"""``vgpu.*``: whether this node is a vGPU guest, and its host's vGPU manager version.

This module owns the vGPU labels. They come from :attr:`gfd.facts.NodeFacts.vgpu`,
which is None when PCI config space could not be read (an unprivileged pod); then
no vGPU label is published at all rather than a guess, and :func:`withheld_vgpu_labels`
says why, for the agent to log once.
"""

from __future__ import annotations

from gfd.facts import NodeFacts
from gfd.labels.labeler import FamilyLabeler
from gfd.labels.rules import sanitise_value

PRESENT_KEY = "nvidia.com/vgpu.present"
HOST_DRIVER_VERSION_KEY = "nvidia.com/vgpu.host-driver-version"
HOST_DRIVER_BRANCH_KEY = "nvidia.com/vgpu.host-driver-branch"
UNREADABLE_REASON = (
    "PCI config space of the GPUs is unreadable (the kernel gives unprivileged pods only "
    "64 bytes); run gfd privileged (the vgpu deployment overlay) to publish vGPU labels"
)


def vgpu_labels(facts: NodeFacts) -> dict[str, str]:
    """``vgpu.present`` and, in a vGPU guest, ``vgpu.host-driver-version`` / ``-branch``."""
    vgpu = facts.vgpu
    if vgpu is None:
        return {}
    labels = {PRESENT_KEY: "true" if vgpu.present else "false"}
    if vgpu.present and vgpu.host_driver_version is not None:
        labels[HOST_DRIVER_VERSION_KEY] = sanitise_value(vgpu.host_driver_version)
    if vgpu.present and vgpu.host_driver_branch is not None:
        labels[HOST_DRIVER_BRANCH_KEY] = sanitise_value(vgpu.host_driver_branch)
    return labels


def withheld_vgpu_labels(facts: NodeFacts) -> tuple[tuple[str, str], ...]:
    """(key, why) for vGPU labels that could not be published on a node with GPUs."""
    if facts.vgpu is None and facts.gpus:
        return ((PRESENT_KEY, UNREADABLE_REASON),)
    return ()


#: A vGPU guest without GPUs visible to NVML is still worth telling the scheduler about.
VGPU_LABELER = FamilyLabeler(
    "vGPU",
    lambda inputs: vgpu_labels(inputs.facts),
    applies_without_gpus=True,
    report_withheld=lambda inputs: withheld_vgpu_labels(inputs.facts),
)
