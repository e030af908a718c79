"""vGPU guest detection: from PCI configuration space (read through :mod:`gfd.facts.pci`), and
from NVML's virtualization mode.

This module owns how gfd tells that it runs in a vGPU guest. NVIDIA's vGPU manager
exposes, in the config space of the guest's GPU function, a PCI vendor-specific
capability (id ``0x09``) whose bytes 3 and 4 are ``VF``. After a 5-byte header the
capability holds records (``id``, ``length``, data); the record with id 0 carries the
host driver version and branch, 10 NUL-padded ASCII bytes each. This is what NVIDIA's
reference reads, and the only place the host driver is told.

The kernel hands unprivileged readers only the first 64 bytes of
``/sys/bus/pci/devices/<addr>/config``, where no capability list fits. Then config space
says nothing about vGPU: :func:`read_vgpu` returns no facts (never an error). NVML's
``nvmlDeviceGetVirtualizationMode`` (:func:`read_virtualization_mode`, per GPU) answers
without privileges whether a GPU is a vGPU in a VM, on bare metal or passed through;
the vGPU labeler (:mod:`gfd.labels.vgpu`) combines the two.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml

from gfd.facts import VgpuInfo
from gfd.facts.pci import PciFunction, UnreadableConfig, nvidia_display_functions, vendor_capability
from gfd.nvml.calls import NvmlCaller

VGPU_SIGNATURE = b"VF"
#: Offset of the first record inside the vGPU capability.
VGPU_RECORDS_START = 5
HOST_DRIVER_RECORD = 0
HOST_DRIVER_VERSION_LENGTH = 10
HOST_DRIVER_BRANCH_LENGTH = 10


def is_vgpu_capability(capability: bytes) -> bool:
    """Whether a vendor-specific capability is NVIDIA's vGPU one (signed ``VF``)."""
    return len(capability) >= VGPU_RECORDS_START and capability[3:5] == VGPU_SIGNATURE


def host_driver(capability: bytes) -> tuple[str, str] | None:
    """(version, branch) from the vGPU capability's host driver record, or None when absent."""
    position = VGPU_RECORDS_START
    visited: set[int] = set()
    while position < len(capability) and capability[position] != HOST_DRIVER_RECORD:
        if position + 1 >= len(capability) or position in visited:
            return None
        visited.add(position)
        length = capability[position + 1]
        if length == 0:
            return None
        position += length
    data = position + 2
    end = data + HOST_DRIVER_VERSION_LENGTH + HOST_DRIVER_BRANCH_LENGTH
    if position >= len(capability) or end > len(capability):
        return None
    version = capability[data : data + HOST_DRIVER_VERSION_LENGTH]
    branch = capability[data + HOST_DRIVER_VERSION_LENGTH : end]
    return _ascii(version), _ascii(branch)


def _ascii(raw: bytes) -> str:
    return raw.strip(b"\x00").decode("ascii", "replace")


def vgpu_from_functions(functions: list[PciFunction]) -> VgpuInfo:
    """vGPU facts from readable config spaces: present when any carries the vGPU capability.

    The host driver comes from the first vGPU function (by address) whose record parses.
    """
    present = False
    for function in functions:
        capability = vendor_capability(function.config)
        if capability is None or not is_vgpu_capability(capability):
            continue
        present = True
        driver = host_driver(capability)
        if driver is not None:
            version, branch = driver
            return VgpuInfo(
                present=True, host_driver_version=version or None, host_driver_branch=branch or None
            )
    return VgpuInfo(present=present)


def read_vgpu(sysfs_root: Path) -> VgpuInfo | None:
    """vGPU facts of the node, or None when config space is unreadable.

    A node with no NVIDIA display function on its PCI bus is no vGPU guest (``present``
    false), as the reference labels it. Never raises: vGPU labels are optional, and an
    unprivileged pod must still label.
    """
    try:
        functions = nvidia_display_functions(sysfs_root)
    except UnreadableConfig:
        return None
    if not functions:
        return VgpuInfo(present=False)
    return vgpu_from_functions(functions)


def read_virtualization_mode(nv: NvmlCaller, handle: Any) -> int | None:
    """The GPU's ``nvmlGpuVirtualizationMode_t``; None when NVML does not report it.

    Every driver branch exports the call and answers it unprivileged (a real H200 in a
    passthrough VM answered PASSTHROUGH as root and as uid 65532,
    ``tests/records/real-gpu/``). It cannot change while the driver stays loaded, so the
    reader asks it once per NVML session.
    """
    mode = nv.optional(
        "nvmlDeviceGetVirtualizationMode", pynvml.nvmlDeviceGetVirtualizationMode, handle
    )
    return int(mode) if mode is not None else None
