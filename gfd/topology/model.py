"""The topology result model: what a builder returns, as frozen dataclasses.

This module owns the codes both builders share (PCIe level codes in the matrix,
interconnect classes) and :class:`Topology`, the result of
:func:`gfd.topology.build_topology`. The NxN matrix is held as two flat ``bytes``
planes (a PCIe level code and an NVLink count per cell), so a 1024-GPU node costs
two 1 MiB buffers rather than a million Python objects; cell strings are made only
when something renders them.

:func:`assemble` turns the raw tuple a builder returns (:data:`RawTopology`) into a
:class:`Topology`; both builders return the same raw shape, so the C and the Python
builder are compared on exactly what they computed.
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from gfd.base.frozen import frozen_dataclass

#: PCIe level codes held in :attr:`Topology.levels`, and their ``nvidia-smi topo -m`` spelling.
#: NVML's INTERNAL (two GPUs on one board) has no code of its own in nvidia-smi's legend
#: and is shown as PIX, the closest one.
LEVEL_SELF = 0
LEVEL_PIX = 1
LEVEL_PXB = 2
LEVEL_PHB = 3
LEVEL_NODE = 4
LEVEL_SYS = 5
LEVEL_UNKNOWN = 6
LEVEL_NAMES: tuple[str, ...] = ("X", "PIX", "PXB", "PHB", "NODE", "SYS", "N/A")

#: NVML ``nvmlGpuTopologyLevel_t`` value → level code; 255 in the compact input means
#: "NVML did not report this pair".
NVML_LEVEL_CODES: dict[int, int] = {
    0: LEVEL_PIX,
    10: LEVEL_PIX,
    20: LEVEL_PXB,
    30: LEVEL_PHB,
    40: LEVEL_NODE,
    50: LEVEL_SYS,
}
LEVEL_NOT_REPORTED = 255

Interconnect = Literal["none", "single", "pcie", "nvlink-partial", "nvlink", "nvswitch"]
#: Interconnect classes by the code a builder returns.
INTERCONNECTS: tuple[Interconnect, ...] = (
    "none",
    "single",
    "pcie",
    "nvlink-partial",
    "nvlink",
    "nvswitch",
)

#: What a builder returns: (levels plane, NVLink plane, domains as (GPU indices,
#: all-to-all, through one NVSwitch fabric), interconnect code, minimum NVLink count
#: over ordered GPU pairs or -1, worst level code over pairs without NVLink or -1,
#: (NUMA node, GPU count) sorted by node), active NVLinks per GPU to GPUs outside the
#: node (one byte per GPU).
RawDomain = tuple[tuple[int, ...], bool, bool]
RawTopology = tuple[
    bytes, bytes, list[RawDomain], int, int, int, tuple[tuple[int, int], ...], bytes
]


@frozen_dataclass
class NvLinkDomain:
    """GPUs connected to each other through NVLink, directly or via NVSwitch."""

    #: GPU indices, ascending.
    gpus: tuple[int, ...]
    #: Every GPU of the domain has NVLink to every other one.
    all_to_all: bool
    #: Every GPU of the domain reaches the others through one NVSwitch fabric.
    nvswitch: bool


@frozen_dataclass
class TopologySummary:
    """What the interconnect labels are made from."""

    interconnect: Interconnect
    #: Fewest NVLinks between any two GPUs (0 when some pair has none); None below 2 GPUs.
    min_nvlinks: int | None
    #: Worst level (``PIX`` … ``SYS``, ``N/A``) over GPU pairs without NVLink; None when
    #: every pair has NVLink or there is no pair.
    pcie_worst: str | None
    #: NUMA nodes the GPUs are attached to, ascending (GPUs with no NUMA node are left out).
    numa_nodes: tuple[int, ...]
    #: (NUMA node, number of GPUs on it), ascending by node.
    gpus_per_numa_node: tuple[tuple[int, int], ...]

    @property
    def weakest_link(self) -> str | None:
        """The weakest pair's link as a matrix cell (``NV12``, ``SYS``); None below 2 GPUs."""
        if self.min_nvlinks is None:
            return None
        if self.min_nvlinks > 0:
            return f"NV{self.min_nvlinks}"
        return self.pcie_worst


@frozen_dataclass
class Topology:
    """GPUxGPU link matrix, NVLink domains and summary of one node.

    Cell ``(a, b)`` is ``X`` on the diagonal, ``NV<k>`` when GPU ``a`` has ``k``
    NVLinks that reach GPU ``b`` (directly, or through the NVSwitch fabric both
    are attached to), else the PCIe level of the pair. Like ``nvidia-smi topo -m``,
    row ``a`` counts the links that GPU ``a`` reports.
    """

    gpu_count: int
    #: ``gpu_count²`` level codes, row-major (``LEVEL_*``).
    levels: bytes = field(repr=False)
    #: ``gpu_count²`` NVLink counts, row-major.
    nvlinks: bytes = field(repr=False)
    domains: tuple[NvLinkDomain, ...]
    summary: TopologySummary
    #: Per GPU, active NVLinks whose far end is a GPU that is not on this node (a VM
    #: given one GPU of an NVLink-bridged pair); they count toward no pair.
    outside_nvlinks: tuple[int, ...] = ()

    def cell(self, a: int, b: int) -> str:
        """The ``nvidia-smi topo -m`` code of GPU ``a`` (row) to GPU ``b`` (column)."""
        n = self.gpu_count
        if not (0 <= a < n and 0 <= b < n):
            raise IndexError(f"GPU pair ({a}, {b}) is outside a {n}-GPU topology")
        offset = a * n + b
        links = self.nvlinks[offset]
        if links and a != b:
            return f"NV{links}"
        return LEVEL_NAMES[self.levels[offset]]

    def row(self, a: int) -> list[str]:
        """All cells of GPU ``a``'s row."""
        return [self.cell(a, b) for b in range(self.gpu_count)]

    def matrix(self) -> list[list[str]]:
        """Every cell, as rows of strings (N² strings: for rendering, not for hot paths)."""
        return [self.row(a) for a in range(self.gpu_count)]

    def has_unknown_levels(self) -> bool:
        """True when some pair without NVLink has a level NVML did not report."""
        unknown = bytes([LEVEL_UNKNOWN])
        start = self.levels.find(unknown)
        while start != -1:
            if not self.nvlinks[start]:
                return True
            start = self.levels.find(unknown, start + 1)
        return False


def assemble(raw: RawTopology, gpu_count: int) -> Topology:
    """Wrap a builder's raw result in a :class:`Topology`."""
    levels, nvlinks, domains, interconnect, min_nvlinks, pcie_worst, numa, outside = raw
    return Topology(
        gpu_count=gpu_count,
        levels=levels,
        nvlinks=nvlinks,
        domains=tuple(
            NvLinkDomain(gpus=gpus, all_to_all=all_to_all, nvswitch=nvswitch)
            for gpus, all_to_all, nvswitch in domains
        ),
        summary=TopologySummary(
            interconnect=INTERCONNECTS[interconnect],
            min_nvlinks=None if min_nvlinks < 0 else min_nvlinks,
            pcie_worst=None if pcie_worst < 0 else LEVEL_NAMES[pcie_worst],
            numa_nodes=tuple(node for node, _ in numa),
            gpus_per_numa_node=numa,
        ),
        outside_nvlinks=tuple(outside),
    )
