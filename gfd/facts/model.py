"""The facts model: everything gfd reads from a node, as frozen dataclasses.

This module owns what a fact is: :class:`NodeFacts` and the dataclasses it is made of,
and the NVML enumerations the facts name by text (PCI topology levels, NVLink remote
types, fabric states, P2P statuses, GPU instance profile variants). The reader produces
facts, the simulator serves them, and everything downstream (topology, labels) sees the
hardware only through them. Their serialised form is :mod:`gfd.facts.serialise` and
:mod:`gfd.facts.validate` (schema version :data:`SCHEMA_VERSION`, documented in
``docs/facts.md``).

Conventions: ``None`` means "NVML (or sysfs) did not report it" (NOT_SUPPORTED,
unreadable), never "zero". PCI bus ids use NVML's form ``00000000:1B:00.0``.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Literal

from gfd.base.frozen import frozen_dataclass

SCHEMA_VERSION = 1

#: NVML's ``nvmlGpuTopologyLevel_t`` names, in order of increasing distance.
PCI_LEVELS: dict[str, int] = {
    "internal": 0,
    "single": 10,
    "multiple": 20,
    "hostbridge": 30,
    "node": 40,
    "system": 50,
}
PciLevel = Literal["internal", "single", "multiple", "hostbridge", "node", "system"]

#: NVML's ``nvmlNvLinkRemoteDeviceType_t``.
NVLINK_REMOTE_TYPES: dict[str, int] = {"gpu": 0, "ibmnpu": 1, "switch": 2, "unknown": 0xFF}
NvLinkRemoteType = Literal["gpu", "ibmnpu", "switch", "unknown"]

#: NVML's ``nvmlGpuFabricState_t``.
FABRIC_STATES: dict[str, int] = {
    "not-supported": 0,
    "not-started": 1,
    "in-progress": 2,
    "completed": 3,
}
FabricState = Literal["not-supported", "not-started", "in-progress", "completed"]

#: ``NVML_GPU_INSTANCE_PROFILE_*`` indices of the profile variants, and the suffix NVIDIA's
#: tools write after the profile (``1g.12gb+me``, ``1g.12gb+me.all``, ``4g.71gb-me``,
#: ``1g.24gb+gfx``): ``+me`` media extensions (REV1), ``+me.all`` all media engines,
#: ``-me`` no media engine, ``+gfx`` graphics. Other indices have no suffix.
GI_PROFILE_VARIANTS: dict[int, str] = {
    0x7: "+me",
    0x8: "+me",
    0xA: "+gfx",
    0xB: "+gfx",
    0xC: "+gfx",
    0xD: "-me",
    0xE: "-me",
    0xF: "+me.all",
    0x10: "+me.all",
    0x11: "+gfx",
}
#: ``NVML_GPU_INSTANCE_PROFILE_COUNT`` of current headers: indices run below it.
GI_PROFILE_INDEX_COUNT = 0x12
#: NVML's ``nvmlGpuP2PStatus_t`` (``NVML_P2P_STATUS_*``), as names.
P2P_STATUSES: dict[str, int] = {
    "ok": 0,
    "chipset-not-supported": 1,
    "gpu-not-supported": 2,
    "ioh-topology-not-supported": 3,
    "disabled-by-regkey": 4,
    "not-supported": 5,
    "unknown": 6,
}
P2PStatus = Literal[
    "ok",
    "chipset-not-supported",
    "gpu-not-supported",
    "ioh-topology-not-supported",
    "disabled-by-regkey",
    "not-supported",
    "unknown",
]

#: NVML's ``nvmlGpuVirtualizationMode_t`` (``NVML_GPU_VIRTUALIZATION_MODE_*``), as names:
#: bare metal, a GPU passed through to a VM, a vGPU in a VM (a vGPU guest), and a
#: hypervisor host's GPU in vGPU or vSGA mode.
GPU_VIRTUALIZATION_MODES: dict[str, int] = {
    "none": 0,
    "passthrough": 1,
    "vgpu": 2,
    "host-vgpu": 3,
    "host-vsga": 4,
}

BUS_ID_PATTERN = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
#: A board serial as ``nvmlDeviceGetSerial`` returns it: nvml.h calls it alphanumeric and
#: at most ``NVML_DEVICE_SERIAL_BUFFER_SIZE`` (30) bytes with the NUL; printable ASCII
#: without spaces is accepted, so that no real board's answer is refused.
SERIAL_PATTERN = re.compile(r"^[\x21-\x7e]{1,29}$")


@frozen_dataclass
class NvLink:
    """One NVLink of a GPU, as ``nvmlDeviceGetNvLink*`` reports it."""

    index: int
    active: bool
    #: PCI bus id of the far end (a GPU or an NVSwitch); None when not reported.
    remote_bus_id: str | None = None
    remote_type: NvLinkRemoteType | None = None


@frozen_dataclass
class FabricInfo:
    """``nvmlDeviceGetGpuFabricInfoV``: the GPU's NVLink fabric (clique) membership."""

    #: 16 bytes as a canonical UUID string (all zero when not attached).
    cluster_uuid: str
    clique_id: int
    state: FabricState
    #: NVML return code of the fabric registration (0 is SUCCESS).
    status: int
    health_mask: int | None = None


@frozen_dataclass
class RemappedRows:
    """``nvmlDeviceGetRemappedRows`` (Ampere and later): the GPU's row remapper."""

    #: Rows remapped so far because of correctable and of uncorrectable errors.
    correctable: int
    uncorrectable: int
    #: A remapping waits for a GPU reset to take effect.
    pending: bool
    #: A remapping failed: the GPU's memory can no longer be repaired in place.
    failure: bool


@frozen_dataclass
class RetiredPages:
    """``nvmlDeviceGetRetiredPages`` and ``...PendingStatus`` (GPUs before Ampere)."""

    #: Pages retired because of repeated single-bit errors, and of double-bit errors.
    single_bit: int
    double_bit: int
    #: A retirement waits for a GPU reset (or driver reload) to take effect.
    pending: bool


@frozen_dataclass
class MemoryHealth:
    """What NVML says of a GPU's memory; each None is NOT_SUPPORTED (or not exported).

    Read every cycle: the counts and flags change while gfd runs. No label depends on
    it; the ``memory`` health check does (:mod:`gfd.health.checks.memory`).
    """

    #: ``nvmlDeviceGetEccMode``: ECC on (current mode, not the one pending a reset).
    ecc_enabled: bool | None = None
    #: Row remapping replaced page retirement from Ampere on: a GPU has one or neither.
    remapped_rows: RemappedRows | None = None
    retired_pages: RetiredPages | None = None
    #: ``nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)``: since the driver loaded.
    volatile_uncorrected_ecc: int | None = None


@frozen_dataclass
class PcieLink:
    """The GPU's PCIe link as NVML reports it; each None is NOT_SUPPORTED (or not exported).

    The maxima cannot change while the driver runs (the reader asks them once per NVML
    session), the current link and the replay counter can (asked every read). What the
    link could reach is :attr:`reachable_generation` and :attr:`reachable_width`: the
    ``gpu.pcie.*`` labels and the ``pcie`` health check use nothing else of the maxima.
    """

    #: ``nvmlDeviceGetCurrPcieLinkGeneration`` / ``...Width``: the link as trained now.
    #: NVIDIA documents that both "may be reduced when the GPU is not in use".
    current_generation: int | None = None
    current_width: int | None = None
    #: ``nvmlDeviceGetMaxPcieLinkGeneration`` / ``...Width``: the most "possible with this
    #: device and system" (a Gen5 x16 GPU in a Gen4 x8 slot reports 4 and 8).
    max_generation: int | None = None
    max_width: int | None = None
    #: ``nvmlDeviceGetGpuMaxPcieLinkGeneration``: the GPU's own maximum, whatever the slot
    #: (exported from branch 525 on).
    gpu_max_generation: int | None = None
    #: ``nvmlDeviceGetPcieReplayCounter``: link-level retransmissions since the driver loaded.
    replay_counter: int | None = None
    #: ``nvmlDeviceGetUtilizationRates().gpu`` (percent), asked only in a read whose
    #: current generation is below :attr:`reachable_generation`: whether the GPU was busy
    #: then is what tells a link trained down from one idling to save power.
    gpu_utilization: int | None = None

    @property
    def reachable_generation(self) -> int | None:
        """The highest generation the link could reach: the system's maximum (NVML's is
        already the lower of the GPU's and the slot's), and never above the GPU's own;
        None when NVML does not say what the system allows."""
        if self.max_generation is None:
            return None
        if self.gpu_max_generation is None:
            return self.max_generation
        return min(self.max_generation, self.gpu_max_generation)

    @property
    def reachable_width(self) -> int | None:
        """The widest the link could be with this GPU in this slot (None: not reported)."""
        return self.max_width


@frozen_dataclass
class MigDevice:
    """A MIG device (GPU instance + compute instance) on a MIG-enabled GPU."""

    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    gpu_instance_id: int
    compute_instance_id: int
    #: GPU instance profile, as ``nvmlDeviceGetGpuInstanceProfileInfoV`` reports it.
    gi_profile_id: int
    gi_slice_count: int
    gi_memory_mib: int
    #: Compute instance slices and multiprocessors.
    ci_slice_count: int
    multiprocessors: int
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_decoders: int = 0
    ofa_engines: int = 0
    #: The profile carries media extensions (``+me``).
    media_extensions: bool = False
    #: The ``NVML_GPU_INSTANCE_PROFILE_*`` index at which NVML reports the profile
    #: (``0x7`` is ``1_SLICE_REV1``, i.e. ``+me``); it tells the profile's variant
    #: (:data:`GI_PROFILE_VARIANTS`). None in facts captured before it was recorded.
    gi_profile_index: int | None = None


@frozen_dataclass
class Gpu:
    """One physical GPU."""

    index: int
    name: str
    uuid: str
    #: ``nvmlDeviceGetSerial``: the board's serial number, as on its label (GPUs with an
    #: inforom: data-center boards); None: NOT_SUPPORTED. Keyword-only so that it sits
    #: beside the UUID in the serialised form, before the required ``bus_id``.
    serial: str | None = field(default=None, kw_only=True)
    bus_id: str
    #: ``(device << 16) | vendor`` as in ``nvmlPciInfo_t.pciDeviceId``.
    pci_device_id: int | None = None
    #: PCI class code from sysfs (``0x030200`` 3D controller, ``0x030000`` VGA).
    pci_class: int | None = None
    #: None when NVML reported nothing of it (and in facts captured before it was read).
    pcie: PcieLink | None = None
    memory_total_bytes: int | None = None
    compute_major: int | None = None
    compute_minor: int | None = None
    #: ``nvmlDeviceArchitecture_t`` value.
    architecture: int | None = None
    #: ``nvmlBrandType_t`` value.
    brand: int | None = None
    #: NUMA node the GPU's PCI device is attached to (sysfs ``numa_node``; -1 → None).
    numa_node: int | None = None
    #: ``nvmlDeviceGetNumaNodeId``: the GPU's *own* memory NUMA node on coherent
    #: platforms (Grace Hopper/Blackwell); NOT_SUPPORTED (None) on x86 machines.
    #: nvidia-smi shows it as "GPU NUMA ID".
    gpu_numa_id: int | None = None
    #: CPUs local to the GPU, as a Linux cpulist (``0-47,96-143``); None when unknown.
    cpu_affinity: str | None = None
    #: Current and pending MIG mode; None when the GPU does not support MIG.
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    #: ``nvmlNvLinkVersion`` enum of link 0 (1_0=1 … 5_0=7); None without NVLink.
    nvlink_version: int | None = None
    nvlinks: tuple[NvLink, ...] = ()
    fabric: FabricInfo | None = None
    #: None when NVML reported nothing of it (and in facts captured before it was read).
    memory_health: MemoryHealth | None = None
    #: ``nvmlDeviceGetVirtualizationMode`` (:data:`GPU_VIRTUALIZATION_MODES`): whether the
    #: GPU is on bare metal, passed through to a VM or a vGPU in one. None when NVML did
    #: not report it (and in facts captured before it was read).
    virtualization_mode: int | None = None

    @property
    def coherently_attached(self) -> bool:
        """Whether the GPU reaches its CPU over a coherent link (NVLink-C2C on Grace Hopper
        and Grace Blackwell) rather than PCIe: NVML then makes the GPU's memory a NUMA node
        of its own (:attr:`gpu_numa_id`). What NVML answers of such a GPU's PCIe link says
        nothing of its path to the CPU (a GB10 answers Gen1 x1 for a link it does not have)."""
        return self.gpu_numa_id is not None


@frozen_dataclass
class VgpuInfo:
    """vGPU guest detection from PCI config space (vendor-specific capability signed ``VF``).

    Read from ``bus/pci/devices/<addr>/config`` of the NVIDIA display functions; absent
    (``NodeFacts.vgpu`` None) when that config space could not be read in full.
    """

    #: An NVIDIA function carries the vGPU capability: this node is a vGPU guest.
    present: bool
    #: The hypervisor host's vGPU manager version and branch (``460.16``, ``r460_00``).
    host_driver_version: str | None = None
    host_driver_branch: str | None = None


@frozen_dataclass(slots=True)
class PciPair:
    """``nvmlDeviceGetTopologyCommonAncestor`` for the GPUs with indices ``a < b``."""

    a: int
    b: int
    level: PciLevel


@frozen_dataclass
class NvLinkP2P:
    """``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)`` for GPUs ``a < b``.

    The reader asks only where the answer can change the topology (GPUs on NVSwitch
    fabrics that share no switch), so most nodes have no entry at all.
    """

    a: int
    b: int
    status: P2PStatus


@frozen_dataclass
class NodeFacts:
    """Everything gfd read from one node in one pass."""

    driver_version: str | None = None
    #: ``nvmlSystemGetCudaDriverVersion``: 12040 means CUDA 12.4.
    cuda_driver_version: int | None = None
    #: Raw contents of the DMI product name file; None when unreadable.
    machine_type: str | None = None
    gpus: tuple[Gpu, ...] = ()
    pci_pairs: tuple[PciPair, ...] = ()
    #: NVLink peer-to-peer status of the GPU pairs the reader asked NVML about.
    nvlink_p2p: tuple[NvLinkP2P, ...] = ()
    #: vGPU guest detection; None when PCI config space was unreadable (unprivileged).
    vgpu: VgpuInfo | None = None
    schema_version: int = field(default=SCHEMA_VERSION)
