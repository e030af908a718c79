"""PCI configuration space of a simulated GPU function, as sysfs ``config`` serves it.

This module owns the bytes a simulated machine puts in
``bus/pci/devices/<addr>/config``: the standard header (vendor, device, status
with a capability list, class code), a power-management capability, and a
vendor-specific capability: NVIDIA's vGPU one (signed ``VF``, with the host
driver record) on a vGPU guest, an ordinary one elsewhere. Facts without vGPU
information (``NodeFacts.vgpu`` None) model an unprivileged reader: the kernel
then returns only the first 64 bytes.
"""

from __future__ import annotations

from gfd.facts import VgpuInfo
from gfd.facts.pci import (
    CAPABILITY_POINTER_OFFSET,
    CAPABILITY_VENDOR_SPECIFIC,
    CONFIG_SPACE_SIZE,
    NVIDIA_VENDOR_ID,
    STATUS_CAPABILITY_LIST,
    STATUS_OFFSET,
)
from gfd.nvml.vgpu import (
    HOST_DRIVER_BRANCH_LENGTH,
    HOST_DRIVER_RECORD,
    HOST_DRIVER_VERSION_LENGTH,
    VGPU_SIGNATURE,
)

#: What the kernel lets an unprivileged process read of config space.
UNPRIVILEGED_CONFIG_SIZE = 64
CAPABILITY_POWER_MANAGEMENT = 0x01
POWER_MANAGEMENT_OFFSET = 0x60
VENDOR_CAPABILITY_OFFSET = 0x68
#: A record the host puts before the driver record; readers must step over it.
OTHER_VGPU_RECORD = 0x02


def host_driver_field(text: str, length: int) -> bytes:
    """A NUL-padded ASCII field of the host driver record; raises ValueError when too long."""
    raw = text.encode("ascii")
    if len(raw) > length or b"\x00" in raw:
        raise ValueError(f"{text!r} does not fit a {length}-byte NUL-padded ASCII field")
    return raw.ljust(length, b"\x00")


def vendor_capability_body(vgpu: VgpuInfo) -> bytes:
    """The vendor-specific capability after its id and next-pointer bytes."""
    if not vgpu.present:
        # An ordinary (passthrough) GPU's vendor capability: no VF signature.
        body = bytes([0x01, 0x00]) + bytes(16)
        return bytes([len(body) + 3]) + body
    records = bytes([OTHER_VGPU_RECORD, 4, 0x01, 0x00])
    if vgpu.host_driver_version is not None:
        version = host_driver_field(vgpu.host_driver_version, HOST_DRIVER_VERSION_LENGTH)
        branch = host_driver_field(vgpu.host_driver_branch or "", HOST_DRIVER_BRANCH_LENGTH)
        records += bytes([HOST_DRIVER_RECORD, 2 + len(version) + len(branch)]) + version + branch
    body = VGPU_SIGNATURE + records
    return bytes([len(body) + 3]) + body


def config_space(device_id: int, pci_class: int, vgpu: VgpuInfo | None) -> bytes:
    """The ``config`` file of a GPU function: 256 bytes, or 64 when ``vgpu`` is None."""
    config = bytearray(CONFIG_SPACE_SIZE)
    config[0:2] = NVIDIA_VENDOR_ID.to_bytes(2, "little")
    config[2:4] = (device_id & 0xFFFF).to_bytes(2, "little")
    config[STATUS_OFFSET] = STATUS_CAPABILITY_LIST
    config[9:12] = (pci_class & 0xFFFFFF).to_bytes(3, "little")
    config[CAPABILITY_POINTER_OFFSET] = POWER_MANAGEMENT_OFFSET
    config[POWER_MANAGEMENT_OFFSET] = CAPABILITY_POWER_MANAGEMENT
    config[POWER_MANAGEMENT_OFFSET + 1] = VENDOR_CAPABILITY_OFFSET
    config[POWER_MANAGEMENT_OFFSET + 2 : POWER_MANAGEMENT_OFFSET + 4] = b"\x03\x00"
    body = vendor_capability_body(vgpu if vgpu is not None else VgpuInfo(present=False))
    capability = bytes([CAPABILITY_VENDOR_SPECIFIC, 0x00]) + body
    end = VENDOR_CAPABILITY_OFFSET + len(capability)
    config[VENDOR_CAPABILITY_OFFSET:end] = capability
    if vgpu is None:
        return bytes(config[:UNPRIVILEGED_CONFIG_SIZE])
    return bytes(config)
