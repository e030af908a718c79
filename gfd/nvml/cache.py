"""What an NVML session remembers between reads: the facts that cannot change while it lasts.

This module owns the shape of that memory. A GPU's facts are kept by UUID
(:class:`GpuStatic`), the node's pairs, NVLink P2P and vGPU facts by the GPUs they belong
to (:class:`ReadCache`); :class:`gfd.nvml.reader.NvmlReader` says when it is dropped.
Each per-device read module fills in its own fields, asked once per session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.facts import MigDevice, NvLinkP2P, PciPair, VgpuInfo


class _Unread:
    """A cached fact not asked yet (distinct from None, which is "absent")."""


UNREAD: Any = _Unread()


@frozen_dataclass
class PcieMaxima:
    """What a GPU's PCIe link could reach (see gfd.nvml.pcie); each None is NOT_SUPPORTED."""

    generation: int | None
    width: int | None
    gpu_generation: int | None


@dataclass
class GpuStatic:
    """The facts of one GPU (by UUID) that cannot change while an NVML session lasts."""

    name: str
    bus_id: str
    pci_device_id: int | None
    pci_class: int | None
    memory_total_bytes: int | None
    compute_major: int | None
    compute_minor: int | None
    architecture: int | None
    brand: int | None
    numa_node: int | None
    gpu_numa_id: int | None
    cpu_affinity: str | None
    #: ``nvmlDeviceGetSerial`` (None: NOT_SUPPORTED).
    serial: str | None = None
    link_count: Any = UNREAD
    nvlink_version: Any = UNREAD
    mig_slots: Any = UNREAD
    #: GPU instance profiles of a MIG-enabled GPU (see gfd.nvml.mig.gpu_instance_profiles).
    profiles: Any = UNREAD
    #: (remote bus id, remote type) of each link while it stays active.
    remotes: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    #: MIG devices by (slot, UUID): a MIG device keeps its facts while it exists.
    migs: dict[tuple[int, str], MigDevice] = field(default_factory=dict)
    #: The current ECC mode (None: NOT_SUPPORTED), and whether the GPU answers remapped
    #: rows and retired pages (None: not asked yet); see gfd.nvml.memory_health.
    ecc_enabled: Any = UNREAD
    remapped_rows_supported: bool | None = None
    retired_pages_supported: bool | None = None
    #: The PCIe link's maxima (:class:`PcieMaxima`), fixed by the GPU and its slot, and
    #: the PCIe calls of every read that this GPU answered absent (not asked again).
    pcie_maxima: Any = UNREAD
    pcie_unanswered: set[str] = field(default_factory=set)
    #: nvmlDeviceGetVirtualizationMode (None: not reported); see gfd.nvml.vgpu.
    virtualization_mode: int | None = None


@dataclass
class ReadCache:
    """What one NVML session has read that cannot change while it lasts."""

    gpus: dict[str, GpuStatic] = field(default_factory=dict)
    #: The bus ids of the GPUs (in index order) the pairs and vGPU facts below belong to.
    pairs_of: tuple[str, ...] | None = None
    pairs: tuple[PciPair, ...] = ()
    p2p_of: tuple[tuple[str, ...], tuple[int, ...]] | None = None
    p2p: tuple[NvLinkP2P, ...] = ()
    vgpu_of: tuple[str, ...] | None = None
    vgpu: VgpuInfo | None = None
