"""The fake sysfs tree a simulated machine comes with.

NVML does not report everything gfd reads: the PCI class, the PCI NUMA node, the
local CPU list and the PCI config space (vGPU detection) come from
``/sys/bus/pci/devices/<bus id>/`` and the machine type from
``/sys/class/dmi/id/product_name``. This module writes those files under a root
directory, in the forms the kernel uses, from the facts.

It also writes what NVIDIA's reference reads from each device directory and gfd does
not (so the reference can run on a simulated machine): ``resource``, the kernel's table of
the function's regions, one ``start end flags`` line (hex) per BAR, ROM and bridge
window. A GPU's regions are BAR0 (16 MiB of registers), BAR1 (the framebuffer aperture,
a power of two at least the GPU's memory, 256 MiB when unknown) and BAR3 (32 MiB), as
NVIDIA's data-centre GPUs expose them; their addresses are laid out by GPU index, so
they differ per GPU and do not change from run to run.
"""

from __future__ import annotations

from pathlib import Path

from gfd.facts import NodeFacts
from gfd.facts.pci import NVIDIA_VENDOR_ID, PCI_DEVICES, sysfs_bus_id
from gfd.sim.pci_config import config_space

#: Lines of a type-0 function's ``resource`` file: 6 BARs, the ROM, 4 SR-IOV/bridge windows
#: and the two the kernel appends; unused regions are all zero.
RESOURCE_LINES = 13
#: ``IORESOURCE_MEM | IORESOURCE_SIZEALIGN`` (BAR0) and, for BAR1/BAR3, also
#: ``IORESOURCE_PREFETCH | IORESOURCE_MEM_64`` (the kernel's flags for such BARs).
_MEM_FLAGS = 0x40200
_PREFETCH64_FLAGS = 0x14220C
_MIB = 1 << 20
DMI_PRODUCT_NAME = Path("class") / "dmi" / "id" / "product_name"
#: The files of a GPU's directory that other programs read and gfd does not: ``resource``
#: (NVIDIA's reference reads it), ``device``, the kernel's device-id attribute (PCI
#: listing tools read it), and ``local_cpulist`` (gfd asks NVML for the CPU affinity).
READ_BY_OTHER_PROGRAMS = ("device", "local_cpulist", "resource")


def _resource_table(gpu_index: int, memory_bytes: int | None) -> str:
    """The ``resource`` file of a GPU: BAR0, BAR1 and BAR3 mapped, every other line zero."""
    aperture = 256 * _MIB
    while memory_bytes is not None and aperture < memory_bytes:
        aperture <<= 1
    # BAR0 is a 32-bit BAR: 16 MiB slots from 2 GiB up, distinct for the first 128 GPUs.
    # The 64-bit BARs get a 1 TiB window per GPU.
    window = (1 << 40) * (gpu_index + 1)
    regions = {
        0: (0x80000000 + (gpu_index % 128) * 16 * _MIB, 16 * _MIB, _MEM_FLAGS),
        1: (window, aperture, _PREFETCH64_FLAGS),
        3: (window + aperture, 32 * _MIB, _PREFETCH64_FLAGS),
    }
    lines = []
    for index in range(RESOURCE_LINES):
        start, size, flags = regions.get(index, (0, 0, 0))
        end = start + size - 1 if size else 0
        lines.append(f"0x{start:016x} 0x{end:016x} 0x{flags:016x}\n")
    return "".join(lines)


def write_sysfs_tree(facts: NodeFacts, root: Path, *, for_other_programs: bool = True) -> Path:
    """Write the PCI device and DMI files for ``facts`` under ``root``; return the DMI file path.

    Absent facts leave files out (``pci_class`` None: no ``class`` file; ``cpu_affinity``
    None: no ``local_cpulist``; ``machine_type`` None: no DMI file). A GPU without a
    NUMA node reads ``-1``, as the kernel writes on machines without NUMA. ``config``
    holds 256 bytes of config space with the vGPU capability when ``facts.vgpu`` is set,
    else the 64 bytes the kernel gives an unprivileged reader. ``for_other_programs``
    False leaves out :data:`READ_BY_OTHER_PROGRAMS`, which gfd never reads: a tree that
    only gfd's own run reads has four files a GPU instead of seven to write and remove.
    """
    # A real /sys always has the directory, also on a machine without GPUs.
    (root / PCI_DEVICES).mkdir(parents=True, exist_ok=True)
    for gpu in facts.gpus:
        device = root / PCI_DEVICES / sysfs_bus_id(gpu.bus_id)
        device.mkdir(parents=True, exist_ok=True)
        if gpu.pci_class is not None:
            (device / "class").write_text(f"0x{gpu.pci_class:06x}\n", encoding="ascii")
        (device / "vendor").write_text(f"0x{NVIDIA_VENDOR_ID:04x}\n", encoding="ascii")
        if gpu.pci_device_id is not None and for_other_programs:
            (device / "device").write_text(f"0x{gpu.pci_device_id >> 16:04x}\n", encoding="ascii")
        numa = gpu.numa_node if gpu.numa_node is not None else -1
        (device / "numa_node").write_text(f"{numa}\n", encoding="ascii")
        if gpu.cpu_affinity is not None and for_other_programs:
            (device / "local_cpulist").write_text(f"{gpu.cpu_affinity}\n", encoding="ascii")
        device_id = gpu.pci_device_id >> 16 if gpu.pci_device_id is not None else 0
        config = config_space(device_id, gpu.pci_class or 0, facts.vgpu)
        (device / "config").write_bytes(config)
        if for_other_programs:
            (device / "resource").write_text(_resource_table(gpu.index, gpu.memory_total_bytes))
    machine_type_file = root / DMI_PRODUCT_NAME
    machine_type_file.parent.mkdir(parents=True, exist_ok=True)
    if facts.machine_type is not None:
        machine_type_file.write_text(facts.machine_type + "\n", encoding="utf-8")
    return machine_type_file
