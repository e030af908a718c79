"""One physical GPU as NVML (and its sysfs directory) shows it: the per-device read.

This module owns :func:`read_gpu`, which asks for a GPU's identity every read (name and
UUID), reads what cannot change while it keeps that UUID once per session (PCI identity
and class, memory, compute capability, architecture, brand, NUMA nodes, CPU affinity,
virtualization mode: :func:`read_gpu_static`), and composes the reads that can change from cycle to cycle:
MIG mode and devices (:mod:`gfd.nvml.mig`), NVLinks (:mod:`gfd.nvml.nvlink`) and fabric
(:mod:`gfd.nvml.fabric`), the PCIe link (:mod:`gfd.nvml.pcie`), memory health
(:mod:`gfd.nvml.memory_health`). A further per-device fact is one more read composed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml

from gfd.base.inputs import SYSFS_ATTRIBUTE_LIMIT, InputRejected, read_bounded
from gfd.facts import SERIAL_PATTERN, Gpu, cpulist_from_ids
from gfd.facts.pci import PCI_DEVICES, read_hex, read_sysfs_int, sysfs_bus_id
from gfd.nvml.cache import GpuStatic, ReadCache
from gfd.nvml.calls import NvmlCaller, text
from gfd.nvml.fabric import read_fabric
from gfd.nvml.memory_health import read_memory_health
from gfd.nvml.mig import mig_devices_if_enabled
from gfd.nvml.nvlink import read_nvlink_version, read_nvlinks
from gfd.nvml.pcie import read_pcie
from gfd.nvml.vgpu import read_virtualization_mode

#: Words of 64 CPUs asked of nvmlDeviceGetCpuAffinity: 4096 CPUs covers any machine shipped.
CPU_AFFINITY_WORDS = 64
#: The NUMA nodes online, as a CPU-list-style range (``0``, ``0-1``), under the sysfs root.
NUMA_NODES_ONLINE = Path("devices") / "system" / "node" / "online"


def read_gpu(nv: NvmlCaller, index: int, handle: Any, sysfs_root: Path, cache: ReadCache) -> Gpu:
    """GPU ``index``; its static facts are read again when its UUID or name changed."""
    name = text(nv.required("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
    uuid = text(nv.required("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
    static = cache.gpus.get(uuid)
    if static is None or static.name != name:
        static = read_gpu_static(nv, handle, name, sysfs_root)
        cache.gpus[uuid] = static
    mig = nv.optional("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
    links = read_nvlinks(nv, index, handle, static)
    nvlink_version = read_nvlink_version(nv, handle, static) if links else None
    return Gpu(
        index=index,
        name=name,
        uuid=uuid,
        serial=static.serial,
        bus_id=static.bus_id,
        pci_device_id=static.pci_device_id,
        pci_class=static.pci_class,
        pcie=read_pcie(nv, handle, static),
        memory_total_bytes=static.memory_total_bytes,
        compute_major=static.compute_major,
        compute_minor=static.compute_minor,
        architecture=static.architecture,
        brand=static.brand,
        numa_node=static.numa_node,
        gpu_numa_id=static.gpu_numa_id,
        cpu_affinity=static.cpu_affinity,
        mig_mode_current=bool(mig[0]) if mig is not None else None,
        mig_mode_pending=bool(mig[1]) if mig is not None else None,
        mig_devices=mig_devices_if_enabled(nv, index, handle, static, mig),
        nvlink_version=nvlink_version,
        nvlinks=links,
        fabric=read_fabric(nv, handle),
        memory_health=read_memory_health(nv, handle, static),
        virtualization_mode=static.virtualization_mode,
    )


def read_gpu_static(nv: NvmlCaller, handle: Any, name: str, sysfs_root: Path) -> GpuStatic:
    """The facts of a GPU that last as long as its NVML session and UUID."""
    pci = nv.required("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo_v3, handle)
    bus_id = text(pci.busId).upper()
    memory = nv.unsupported_absent(
        "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle
    )
    compute = nv.unsupported_absent(
        "nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle
    )
    architecture = nv.optional(
        "nvmlDeviceGetArchitecture", pynvml.nvmlDeviceGetArchitecture, handle
    )
    brand = nv.optional("nvmlDeviceGetBrand", pynvml.nvmlDeviceGetBrand, handle)
    gpu_numa = nv.optional("nvmlDeviceGetNumaNodeId", pynvml.nvmlDeviceGetNumaNodeId, handle)
    # Every branch exports it; boards without an inforom (GeForce) answer NOT_SUPPORTED.
    serial = nv.unsupported_absent("nvmlDeviceGetSerial", pynvml.nvmlDeviceGetSerial, handle)
    affinity = nv.optional(
        "nvmlDeviceGetCpuAffinity", pynvml.nvmlDeviceGetCpuAffinity, handle, CPU_AFFINITY_WORDS
    )
    sysfs_dir = sysfs_root / PCI_DEVICES / sysfs_bus_id(bus_id)
    return GpuStatic(
        name=name,
        bus_id=bus_id,
        # 0 is no real device id: NVML leaves it zero when it cannot tell.
        pci_device_id=int(pci.pciDeviceId) or None,
        pci_class=read_hex(sysfs_dir / "class"),
        memory_total_bytes=int(memory.total) if memory is not None else None,
        compute_major=int(compute[0]) if compute is not None else None,
        compute_minor=int(compute[1]) if compute is not None else None,
        architecture=int(architecture) if architecture is not None else None,
        brand=int(brand) if brand is not None else None,
        numa_node=_read_numa_node(sysfs_dir / "numa_node", sysfs_root),
        gpu_numa_id=int(gpu_numa) if gpu_numa is not None else None,
        cpu_affinity=_affinity_to_cpulist(affinity) if affinity is not None else None,
        serial=_serial(serial),
        virtualization_mode=read_virtualization_mode(nv, handle),
    )


def _serial(answer: str | bytes | None) -> str | None:
    """The board serial NVML gave, as the facts hold it: None where it gave none, or text
    the facts' form could not read back (empty, blank, longer than NVML's buffer)."""
    if answer is None:
        return None
    serial = text(answer).strip()
    return serial if SERIAL_PATTERN.match(serial) else None


def _affinity_to_cpulist(words: Any) -> str:
    # Only the set bits: testing all 64 x CPU_AFFINITY_WORDS bits of every GPU took
    # about half of a steady-state cycle's CPU time.
    cpus: list[int] = []
    for word_index, word in enumerate(words):
        value = int(word)
        while value:
            lowest = value & -value
            cpus.append(word_index * 64 + lowest.bit_length() - 1)
            value ^= lowest
    return cpulist_from_ids(cpus)


def _read_numa_node(path: Path, sysfs_root: Path) -> int | None:
    """The PCI device's NUMA node; on a machine of one node, that node.

    The kernel writes -1 when the firmware names no node for the device, which virtual
    machines and single-socket boards commonly do. With only one node online every device
    is on it, and ``nvidia-smi topo -m`` says so (a real H200 in a VM: sysfs -1, node 0
    the only one online, nvidia-smi's NUMA affinity 0; ``tests/records/real-gpu/``). With
    several nodes the device's is not known, and stays absent.
    """
    node = read_sysfs_int(path, base=10)
    if node is not None and node >= 0:
        return node
    return _only_numa_node(sysfs_root / NUMA_NODES_ONLINE)


def _only_numa_node(online: Path) -> int | None:
    """The one NUMA node listed in sysfs's ``online`` file, or None for none, several or unreadable."""
    try:
        listed = read_bounded(online, SYSFS_ATTRIBUTE_LIMIT).decode("ascii").strip()
    except (OSError, InputRejected, UnicodeDecodeError):
        return None
    return int(listed) if listed.isdigit() else None
