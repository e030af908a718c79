"""What NVML says of pairs of GPUs: their PCIe common ancestor and NVLink P2P across fabrics.

This module owns the node-level reads that grow with the number of GPU pairs: one
``nvmlDeviceGetTopologyCommonAncestor`` per pair, and ``nvmlDeviceGetP2PStatus`` only
where its answer can change the topology (between NVSwitch fabrics that share no
switch), so that a normal NVSwitch node makes no P2P call at all. Both are read once
per session for a given set of GPUs (and, for P2P, of fabrics).
"""

from __future__ import annotations

from typing import Any

import pynvml

from gfd.base.errors import NvmlError
from gfd.facts import P2P_STATUSES, PCI_LEVELS, Gpu, NvLinkP2P, PciPair
from gfd.nvml.calls import NvmlCaller

#: ``NVML_P2P_CAPS_INDEX_NVLINK``, written out: pynvml spells some P2P caps constants as
#: one-element tuples (``NVML_P2P_CAPS_INDEX_READ`` is ``(0,)``), which ctypes cannot pass.
P2P_CAPS_INDEX_NVLINK = 2

_LEVEL_NAMES = {value: name for name, value in PCI_LEVELS.items()}
_P2P_STATUS_NAMES = {value: name for name, value in P2P_STATUSES.items()}


def read_pairs(nv: NvmlCaller, handles: list[Any]) -> tuple[PciPair, ...]:
    """The PCIe common ancestor of each pair of GPUs a < b."""
    pairs: list[PciPair] = []
    count = len(handles)
    for a in range(count):
        for b in range(a + 1, count):
            level = nv.optional(
                "nvmlDeviceGetTopologyCommonAncestor",
                pynvml.nvmlDeviceGetTopologyCommonAncestor,
                handles[a],
                handles[b],
            )
            if level is None:
                continue
            if level not in _LEVEL_NAMES:
                raise NvmlError(
                    "nvmlDeviceGetTopologyCommonAncestor",
                    pynvml.NVML_ERROR_UNKNOWN,
                    "NVML_ERROR_UNKNOWN",
                    f"GPUs {a} and {b}: level {level} is not a known nvmlGpuTopologyLevel_t",
                )
            pairs.append(PciPair(a=a, b=b, level=_LEVEL_NAMES[level]))  # type: ignore[arg-type]
    return tuple(pairs)


def switch_fabrics(gpus: tuple[Gpu, ...]) -> list[int]:
    """The lowest GPU of each group of GPUs that share an NVSwitch, ascending.

    A switch link is an active link of remote type ``switch``, or of unreported type
    whose bus id is no GPU of the node (as :mod:`gfd.topology.compact` reads it).
    """
    gpu_buses = {gpu.bus_id.upper() for gpu in gpus}
    parent = list(range(len(gpus)))

    def find(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    first_at_switch: dict[str, int] = {}
    attached: list[int] = []
    for gpu in gpus:
        for link in gpu.nvlinks:
            bus = link.remote_bus_id.upper() if link.remote_bus_id is not None else None
            is_switch = link.remote_type == "switch" or (
                link.remote_type is None and bus is not None and bus not in gpu_buses
            )
            if not link.active or not is_switch:
                continue
            if not attached or attached[-1] != gpu.index:
                attached.append(gpu.index)
            first = find(first_at_switch.setdefault(bus or "", gpu.index))
            own = find(gpu.index)
            parent[max(first, own)] = min(first, own)
    return [gpu for gpu in attached if find(gpu) == gpu]


def read_nvlink_p2p(
    nv: NvmlCaller, handles: list[Any], gpus: tuple[Gpu, ...]
) -> tuple[NvLinkP2P, ...]:
    """NVLink P2P status where it can change the topology: between NVSwitch fabrics.

    GPUs that share a switch reach each other over NVLink by construction; GPUs on
    fabrics that share no switch do only when switch-to-switch trunks join them
    (DGX-2/HGX-2), which no link query shows. One pair per two fabrics is asked (their
    lowest GPUs), none where the two are already known to be joined: a normal DGX/HGX
    node (one fabric) makes no call, a two-board DGX-2 one.
    """
    fabrics = switch_fabrics(gpus)
    group = list(range(len(fabrics)))
    entries: list[NvLinkP2P] = []
    for j in range(1, len(fabrics)):
        refused: set[int] = set()
        for i in range(j):
            if group[i] == group[j] or group[i] in refused:
                continue
            a, b = fabrics[i], fabrics[j]
            status = nv.optional(
                "nvmlDeviceGetP2PStatus",
                pynvml.nvmlDeviceGetP2PStatus,
                handles[a],
                handles[b],
                P2P_CAPS_INDEX_NVLINK,
            )
            if status is None:
                if nv.absences.get("nvmlDeviceGetP2PStatus") == "NVML_ERROR_FUNCTION_NOT_FOUND":
                    return tuple(entries)
                continue
            name = _P2P_STATUS_NAMES.get(int(status), "unknown")
            entries.append(NvLinkP2P(a=a, b=b, status=name))  # type: ignore[arg-type]
            if name != "ok":
                refused.add(group[i])
                continue
            joined, merged = min(group[i], group[j]), max(group[i], group[j])
            group = [joined if g == merged else g for g in group]
    return tuple(entries)
