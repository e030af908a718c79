"""Generated machines of any size, for the topology benchmark and scale tests.

This module owns :func:`generated_machine`: facts of an imaginary node with ``n``
GPUs that exercises every part of a builder at once. GPUs come in boards of eight
(the last board may be smaller); each board is wired either through its own NVSwitch
fabric (18 links per GPU to 4 switches, like HGX H100) or point to point as a hybrid
cube mesh (like DGX-1V). The PCIe tree puts pairs of GPUs under one switch (PIX),
fours under a deeper switch (PXB), a board under one host bridge (PHB), and boards
on the same NUMA node meet at NODE, the rest at SYS.
"""

from __future__ import annotations

from typing import Literal

from gfd.facts import Gpu, NodeFacts, NvLink, PciLevel, PciPair

BOARD = 8
SWITCHES_PER_BOARD = 4
LINKS_PER_GPU = 18
#: Hybrid cube mesh of one 8-GPU board: (GPU, GPU, links).
CUBE_MESH = (
    (0, 1, 1), (0, 2, 1), (0, 3, 2), (0, 4, 2),
    (1, 2, 2), (1, 3, 1), (1, 5, 2),
    (2, 3, 2), (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1), (4, 6, 1), (4, 7, 2),
    (5, 6, 2), (5, 7, 1),
    (6, 7, 2),
)  # fmt: skip

Wiring = Literal["nvswitch", "mesh"]


def generated_machine(n: int, *, wiring: Wiring = "nvswitch", numa_nodes: int = 2) -> NodeFacts:
    """Facts of an ``n``-GPU node wired as described in the module docstring."""
    if n < 0:
        raise ValueError(f"a machine has at least 0 GPUs, got {n}")
    numa_of = [gpu * numa_nodes // max(n, 1) for gpu in range(n)]
    links = _switch_links(n) if wiring == "nvswitch" else _mesh_links(n)
    gpus = tuple(
        Gpu(
            index=gpu,
            name="Generated GPU",
            uuid=f"GPU-{gpu:08x}-0000-0000-0000-000000000000",
            bus_id=_gpu_bus_id(gpu),
            numa_node=numa_of[gpu],
            cpu_affinity=f"{numa_of[gpu] * 32}-{numa_of[gpu] * 32 + 31}",
            nvlinks=tuple(links[gpu]),
        )
        for gpu in range(n)
    )
    pairs = tuple(
        PciPair(a=a, b=b, level=_level(a, b, numa_of)) for a in range(n) for b in range(a + 1, n)
    )
    return NodeFacts(driver_version="580.00", gpus=gpus, pci_pairs=pairs)


def _gpu_bus_id(gpu: int) -> str:
    return f"{gpu // 256:08X}:{gpu % 256:02X}:00.0"


def _switch_bus_id(board: int, switch: int) -> str:
    return f"{0x8000 + board:08X}:{switch:02X}:00.0"


def _level(a: int, b: int, numa_of: list[int]) -> PciLevel:
    if a // 2 == b // 2:
        return "single"
    if a // 4 == b // 4:
        return "multiple"
    if a // BOARD == b // BOARD:
        return "hostbridge"
    if numa_of[a] == numa_of[b]:
        return "node"
    return "system"


def _switch_links(n: int) -> list[list[NvLink]]:
    return [
        [
            NvLink(
                index=link,
                active=True,
                remote_bus_id=_switch_bus_id(gpu // BOARD, link % SWITCHES_PER_BOARD),
                remote_type="switch",
            )
            for link in range(LINKS_PER_GPU)
        ]
        for gpu in range(n)
    ]


def _mesh_links(n: int) -> list[list[NvLink]]:
    links: list[list[NvLink]] = [[] for _ in range(n)]
    for board_start in range(0, n, BOARD):
        for a, b, count in CUBE_MESH:
            first, second = board_start + a, board_start + b
            if second >= n:
                continue
            for _ in range(count):
                for near, far in ((first, second), (second, first)):
                    links[near].append(
                        NvLink(
                            index=len(links[near]),
                            active=True,
                            remote_bus_id=_gpu_bus_id(far),
                            remote_type="gpu",
                        )
                    )
    return links
