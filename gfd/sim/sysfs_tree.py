"""The fake sysfs tree a simulated machine comes with.

NVML does not report everything gfd reads: the PCI class, the PCI NUMA node, the
local CPU list and the PCI config space (vGPU detection) come from
``/sys/bus/pci/devices/<bus id>/`` and the machine type from
``/sys/class/dmi/id/product_name``. This module writes those files under a root
directory, in the forms the kernel uses, from the facts.
"""

from __future__ import annotations

from pathlib import Path

from gfd.facts import NodeFacts
from gfd.sim.pci_config import config_space

PCI_DEVICES = Path("bus") / "pci" / "devices"
DMI_PRODUCT_NAME = Path("class") / "dmi" / "id" / "product_name"
NVIDIA_VENDOR_ID = 0x10DE


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """``00000000:1B:00.0`` (NVML) → ``0000:1b:00.0`` (sysfs: 4-digit domain, lower case)."""
    domain, rest = nvml_bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def write_sysfs_tree(facts: NodeFacts, root: Path) -> Path:
    """Write the PCI device and DMI files for ``facts`` under ``root``; return the DMI file path.

    Absent facts leave files out (``pci_class`` None: no ``class`` file; ``cpu_affinity``
    None: no ``local_cpulist``; ``machine_type`` None: no DMI file). A GPU without a
    NUMA node reads ``-1``, as the kernel writes on machines without NUMA. ``config``
    holds 256 bytes of config space with the vGPU capability when ``facts.vgpu`` is set,
    else the 64 bytes the kernel gives an unprivileged reader.
    """
    for gpu in facts.gpus:
        device = root / PCI_DEVICES / sysfs_bus_id(gpu.bus_id)
        device.mkdir(parents=True, exist_ok=True)
        if gpu.pci_class is not None:
            (device / "class").write_text(f"0x{gpu.pci_class:06x}\n", encoding="ascii")
        (device / "vendor").write_text(f"0x{NVIDIA_VENDOR_ID:04x}\n", encoding="ascii")
        if gpu.pci_device_id is not None:
            (device / "device").write_text(f"0x{gpu.pci_device_id >> 16:04x}\n", encoding="ascii")
        numa = gpu.numa_node if gpu.numa_node is not None else -1
        (device / "numa_node").write_text(f"{numa}\n", encoding="ascii")
        if gpu.cpu_affinity is not None:
            (device / "local_cpulist").write_text(f"{gpu.cpu_affinity}\n", encoding="ascii")
        device_id = gpu.pci_device_id >> 16 if gpu.pci_device_id is not None else 0
        config = config_space(device_id, gpu.pci_class or 0, facts.vgpu)
        (device / "config").write_bytes(config)
    machine_type_file = root / DMI_PRODUCT_NAME
    machine_type_file.parent.mkdir(parents=True, exist_ok=True)
    if facts.machine_type is not None:
        machine_type_file.write_text(facts.machine_type + "\n", encoding="utf-8")
    return machine_type_file
