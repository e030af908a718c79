"""``vgpu.*``: whether this node is a vGPU guest, and its host's vGPU manager version.

This module owns the vGPU labels and which fact answers them. NVIDIA's reference reads
only PCI config space (:attr:`gfd.facts.NodeFacts.vgpu`): a vGPU capability on an NVIDIA
function makes a guest, and its record names the host driver. Config space is None when
it could not be read in full (an unprivileged pod gets 64 bytes); the reference then
publishes no vGPU label, and so does gfd, unless NVML tells: when every GPU reports a
virtualization mode that is no vGPU guest (bare metal or passthrough,
:attr:`gfd.facts.Gpu.virtualization_mode`), ``vgpu.present`` is ``false`` whatever config
space says, and nothing is withheld. Where NVML cannot tell (a mode not reported) or says
a guest, config space answers as in the reference: the host driver labels are only there,
and without it :func:`withheld_vgpu_labels` says why, for the agent to log once.

A hypervisor host's GPU (HOST_VGPU, HOST_VSGA) is left to config space too: the reference
reads every NVIDIA function there, SR-IOV virtual functions included, and NVML's mode of
the physical GPU does not say what those carry.
"""

from __future__ import annotations

from gfd.facts import GPU_VIRTUALIZATION_MODES, NodeFacts
from gfd.labels.labeler import FamilyLabeler
from gfd.labels.rules import sanitise_value

PRESENT_KEY = "nvidia.com/vgpu.present"
HOST_DRIVER_VERSION_KEY = "nvidia.com/vgpu.host-driver-version"
HOST_DRIVER_BRANCH_KEY = "nvidia.com/vgpu.host-driver-branch"
UNREADABLE_REASON = (
    "PCI config space of the GPUs is unreadable (the kernel gives unprivileged pods only "
    "64 bytes); run gfd privileged (the vgpu deployment overlay) to publish vGPU labels"
)
#: NVML virtualization modes of a GPU that is no vGPU in a VM.
NO_GUEST_MODES = frozenset(
    (GPU_VIRTUALIZATION_MODES["none"], GPU_VIRTUALIZATION_MODES["passthrough"])
)


def nvml_says_no_guest(facts: NodeFacts) -> bool:
    """NVML reports, for every GPU of the node, a mode that is no vGPU guest."""
    return bool(facts.gpus) and all(gpu.virtualization_mode in NO_GUEST_MODES for gpu in facts.gpus)


def vgpu_labels(facts: NodeFacts) -> dict[str, str]:
    """``vgpu.present`` and, in a vGPU guest, ``vgpu.host-driver-version`` / ``-branch``."""
    if nvml_says_no_guest(facts):
        return {PRESENT_KEY: "false"}
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
    if facts.vgpu is None and facts.gpus and not nvml_says_no_guest(facts):
        return ((PRESENT_KEY, UNREADABLE_REASON),)
    return ()


#: A vGPU guest without GPUs visible to NVML is still worth telling the scheduler about.
VGPU_LABELER = FamilyLabeler(
    "vGPU",
    lambda inputs: vgpu_labels(inputs.facts),
    applies_without_gpus=True,
    report_withheld=lambda inputs: withheld_vgpu_labels(inputs.facts),
)
