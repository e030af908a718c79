"""The PCI bus as sysfs shows it: addresses, vendor and class codes, config space.

This module owns what every part of gfd that looks at ``<sysfs>/bus/pci/devices`` shares:
the NVML-to-sysfs form of a bus id, NVIDIA's vendor id and the display class, bounded reads
of a device's attributes, the walk of a config space's capability list, and the scan of the
NVIDIA display functions with their config space. The NVML reader (NUMA node, PCI class,
vGPU), the health checks (GPUs that fell off the bus) and the simulator (which writes such a
tree) use it; it knows nothing of NVML, facts or labels.
"""

from __future__ import annotations

from pathlib import Path

from gfd.base.frozen import frozen_dataclass
from gfd.base.inputs import (
    PCI_CONFIG_LIMIT,
    SYSFS_ATTRIBUTE_LIMIT,
    InputRejected,
    read_bounded,
    read_bounded_text,
)

#: Where the kernel lists PCI devices, under the sysfs root.
PCI_DEVICES = Path("bus") / "pci" / "devices"
NVIDIA_VENDOR_ID = 0x10DE
#: PCI base class of display controllers (VGA 0x0300, 3D 0x0302): the GPU functions.
DISPLAY_BASE_CLASS = 0x03
#: Bytes of standard PCI config space; a shorter read is a truncated (unprivileged) one.
CONFIG_SPACE_SIZE = 256
STATUS_OFFSET = 0x06
STATUS_CAPABILITY_LIST = 0x10
CAPABILITY_POINTER_OFFSET = 0x34
CAPABILITY_VENDOR_SPECIFIC = 0x09
CAPABILITY_BROKEN = 0xFF


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """``00000000:8A:00.0`` (NVML: 8-digit domain, upper case) → ``0000:8a:00.0`` (sysfs:
    4-digit domain, lower case); anything that is not NVML's form is only lowered."""
    domain, colon, rest = nvml_bus_id.partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}" if colon else nvml_bus_id.lower()
    except ValueError:
        return nvml_bus_id.lower()


def read_sysfs_int(path: Path, base: int) -> int | None:
    """An integer attribute of sysfs, or None when it is missing or not a number.

    Bounded: a tree that is not the kernel's (a FIFO, /dev/zero) must not hang a cycle.
    """
    try:
        return int(read_bounded_text(path, SYSFS_ATTRIBUTE_LIMIT).strip(), base)
    except (OSError, ValueError):  # InputRejected and UnicodeDecodeError are ValueErrors
        return None


def read_hex(path: Path) -> int | None:
    """A hexadecimal attribute (``vendor``, ``class``), or None."""
    return read_sysfs_int(path, 16)


def is_nvidia_display(device: Path) -> bool:
    """Whether the device directory is an NVIDIA display or 3D controller function."""
    vendor = read_hex(device / "vendor")
    pci_class = read_hex(device / "class")
    return (
        vendor == NVIDIA_VENDOR_ID
        and pci_class is not None
        and (pci_class >> 16 == DISPLAY_BASE_CLASS)
    )


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


@frozen_dataclass
class PciFunction:
    """One NVIDIA display function under ``bus/pci/devices``."""

    address: str
    config: bytes


def nvidia_display_functions(sysfs_root: Path) -> list[PciFunction]:
    """The NVIDIA display functions and their full config space, by PCI address.

    Raises :class:`UnreadableConfig` when a config space is missing or truncated.
    """
    devices = sysfs_root / PCI_DEVICES
    try:
        entries = sorted(devices.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise UnreadableConfig(f"cannot list {devices}: {exc.strerror or exc}") from exc
    functions: list[PciFunction] = []
    for entry in entries:
        if not is_nvidia_display(entry):
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
