"""vGPU guest detection from PCI configuration space.

This module owns how gfd tells that it runs in a vGPU guest: NVIDIA's vGPU
manager exposes, in the config space of the guest's GPU function, a PCI
vendor-specific capability (id ``0x09``) whose bytes 3 and 4 are ``VF``. After
a 5-byte header the capability holds records (``id``, ``length``, data); the
record with id 0 carries the host driver version and branch, 10 NUL-padded
ASCII bytes each.

The kernel hands unprivileged readers only the first 64 bytes of
``/sys/bus/pci/devices/<addr>/config``, where no capability list fits. Then
nothing can be said about vGPU: :func:`read_vgpu` returns no facts (never an
error), the vGPU labeler publishes nothing and reports the labels as withheld,
and the cycle goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gfd.facts import VgpuInfo
from gfd.inputs import (
    PCI_CONFIG_LIMIT,
    SYSFS_ATTRIBUTE_LIMIT,
    InputRejected,
    read_bounded,
    read_bounded_text,
)

NVIDIA_VENDOR_ID = 0x10DE
#: Bytes of standard PCI config space; a shorter read is a truncated (unprivileged) one.
CONFIG_SPACE_SIZE = 256
STATUS_OFFSET = 0x06
STATUS_CAPABILITY_LIST = 0x10
CAPABILITY_POINTER_OFFSET = 0x34
CAPABILITY_VENDOR_SPECIFIC = 0x09
CAPABILITY_BROKEN = 0xFF
VGPU_SIGNATURE = b"VF"
#: Offset of the first record inside the vGPU capability.
VGPU_RECORDS_START = 5
HOST_DRIVER_RECORD = 0
HOST_DRIVER_VERSION_LENGTH = 10
HOST_DRIVER_BRANCH_LENGTH = 10
#: PCI base class of display controllers (VGA 0x0300, 3D 0x0302): the GPU functions.
DISPLAY_BASE_CLASS = 0x03


class UnreadableConfig(Exception):
    """PCI config space could not be read in full; the message says which device and why."""


def vendor_capability(config: bytes) -> bytes | None:
    """The vendor-specific capability of a 256-byte config space, or None when there is none.

    Walks the capability list from the pointer at 0x34, stopping at a loop or a broken
    (``0xFF``) entry as a damaged list can hold either.
    """
    if len(config) < CONFIG_SPACE_SIZE:
        raise ValueError(f"config space is {len(config)} bytes, expected {CONFIG_SPACE_SIZE}")
    if not config[STATUS_OFFSET] & STATUS_CAPABILITY_LIST:
        return None
    visited: set[int] = set()
    position = config[CAPABILITY_POINTER_OFFSET]
    while position != 0 and position not in visited and position + 2 < len(config):
        visited.add(position)
        capability_id = config[position]
        if capability_id == CAPABILITY_BROKEN:
            return None
        if capability_id == CAPABILITY_VENDOR_SPECIFIC:
            length = config[position + 2]
            return config[position : position + length]
        position = config[position + 1]
    return None


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


@dataclass(frozen=True)
class PciFunction:
    """One NVIDIA display function under ``bus/pci/devices``."""

    address: str
    config: bytes


def nvidia_display_functions(sysfs_root: Path) -> list[PciFunction]:
    """The NVIDIA display functions and their full config space, by PCI address.

    Raises :class:`UnreadableConfig` when a config space is missing or truncated.
    """
    devices = sysfs_root / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise UnreadableConfig(f"cannot list {devices}: {exc.strerror or exc}") from exc
    functions: list[PciFunction] = []
    for entry in entries:
        vendor = _read_hex(entry / "vendor")
        pci_class = _read_hex(entry / "class")
        if vendor != NVIDIA_VENDOR_ID or pci_class is None:
            continue
        if pci_class >> 16 != DISPLAY_BASE_CLASS:
            continue
        path = entry / "config"
        try:
            config = read_bounded(path, PCI_CONFIG_LIMIT)
        except OSError as exc:
            raise UnreadableConfig(f"cannot read {path}: {exc.strerror or exc}") from exc
        except InputRejected as exc:
            raise UnreadableConfig(f"{path} {exc}") from exc
        if len(config) < CONFIG_SPACE_SIZE:
            raise UnreadableConfig(
                f"{path} gave {len(config)} of {CONFIG_SPACE_SIZE} bytes "
                "(the kernel truncates config space for unprivileged readers)"
            )
        functions.append(PciFunction(address=entry.name, config=config))
    return functions


def _read_hex(path: Path) -> int | None:
    try:
        return int(read_bounded_text(path, SYSFS_ATTRIBUTE_LIMIT).strip(), 16)
    except (OSError, ValueError):
        return None


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
