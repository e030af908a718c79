"""Facts → the compact input both topology builders take.

This module owns the compact form: flat machine-typed buffers made from facts in
O(GPUs + links + pairs), so the C builder never walks Python objects and both
builders start from the same bytes. Nothing here interprets the topology; it only
encodes, and rejects what cannot be encoded (a malformed bus id, a level name NVML
does not have, a pair that names no GPU).

Two encoders make the same bytes: :func:`encode_python` here, the reference, and
``encode`` of the C extension (``_encode.c``), which reads the GPUs and PCI pairs
straight from the facts' objects. The C one encodes only what it can vouch for and
answers None for anything else (any error, any value of a type the facts do not
declare); :func:`topology_input` then runs the reference, so every error and its
message come from this module alone.

Layout (native byte order):

``bus_keys``
    int64 per GPU: its PCI address as one number (see :func:`bus_key`).
``numa_nodes``
    int32 per GPU: NUMA node, -1 when unknown.
``levels``
    uint8 per GPU pair ``a < b``, row-major upper triangle: NVML's
    ``nvmlGpuTopologyLevel_t`` value (0, 10, 20, 30, 40, 50), or 255 when NVML did
    not report the pair.
``links``
    int64 x 4 per *active* NVLink, sorted by GPU then link index: GPU position,
    link index, remote type (``REMOTE_*``), remote bus key (-1 when not reported).
``p2p``
    int64 x 2 per GPU pair ``a < b`` whose NVLink P2P status NVML reported ``ok``
    (``NodeFacts.nvlink_p2p``), sorted by ``(a, b)``. Other statuses are not encoded:
    they change nothing (see ``python_builder``).
"""

from __future__ import annotations

import re
from array import array
from typing import NoReturn

from gfd.base.errors import TopologyError
from gfd.base.frozen import frozen_dataclass
from gfd.facts import PCI_LEVELS, NodeFacts
from gfd.topology.extension import Implementation, c_extension, check_implementation
from gfd.topology.model import LEVEL_NOT_REPORTED

REMOTE_GPU = 0
REMOTE_IBMNPU = 1
REMOTE_SWITCH = 2
REMOTE_NOT_REPORTED = 254
REMOTE_UNKNOWN = 255
_REMOTE_CODES: dict[str | None, int] = {
    "gpu": REMOTE_GPU,
    "ibmnpu": REMOTE_IBMNPU,
    "switch": REMOTE_SWITCH,
    "unknown": REMOTE_UNKNOWN,
    None: REMOTE_NOT_REPORTED,
}
#: int64 fields per link record.
LINK_FIELDS = 4
#: int64 fields per NVLink P2P record.
P2P_FIELDS = 2

# NVML writes an 8-digit domain, sysfs and NVML's legacy field a 4-digit one; both name
# the same device, and hex case carries no meaning.
_BUS_ID = re.compile(
    r"^([0-9A-Fa-f]{8}|[0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$"
)
_INT32_MAX = 2**31 - 1


@frozen_dataclass
class TopologyInput:
    """The compact input of a topology builder (see the module docstring for the layout)."""

    gpu_count: int
    bus_keys: bytes
    numa_nodes: bytes
    levels: bytes
    links: bytes
    p2p: bytes = b""


def bus_key(bus_id: str) -> int | None:
    """PCI address ``DDDDDDDD:BB:DD.F`` as ``domain<<20 | bus<<12 | device<<4 | function``.

    None when ``bus_id`` is not a PCI bus id.
    """
    match = _BUS_ID.match(bus_id)
    if match is None:
        return None
    domain, bus, device, function = (int(part, 16) for part in match.groups())
    return domain << 20 | bus << 12 | device << 4 | function


def bus_id_of_key(key: int) -> str:
    """The NVML spelling of a bus key (the inverse of :func:`bus_key`)."""
    return f"{key >> 20:08X}:{(key >> 12) & 0xFF:02X}:{(key >> 4) & 0xFF:02X}.{key & 0xF:X}"


def topology_input(facts: NodeFacts, *, implementation: Implementation = "c") -> TopologyInput:
    """Encode the topology-relevant facts; raise TopologyError on what cannot be encoded."""
    check_implementation(implementation)
    if implementation == "c":
        encoded = c_extension().encode(facts.gpus, facts.pci_pairs, PCI_LEVELS, _REMOTE_CODES)
        if encoded is not None:
            bus_keys, numa_nodes, levels, links = encoded
            n = len(facts.gpus)
            return TopologyInput(
                gpu_count=n,
                bus_keys=bus_keys,
                numa_nodes=numa_nodes,
                levels=levels,
                links=links,
                p2p=_p2p_records(facts, n),
            )
    return encode_python(facts)


def encode_python(facts: NodeFacts) -> TopologyInput:
    """The reference encoder: the twin of the C extension's ``encode``, and its errors."""
    gpus = facts.gpus
    n = len(gpus)
    bus_keys = array("q")
    numa_nodes = array("i")
    links = array("q")
    gpu_keys = {bus_key(gpu.bus_id) for gpu in gpus}
    for position, gpu in enumerate(gpus):
        if gpu.index != position:
            raise TopologyError(
                f"GPU at position {position} has index {gpu.index}; "
                "GPU indices must be 0..N-1 in order"
            )
        key = bus_key(gpu.bus_id)
        if key is None:
            raise TopologyError(
                f"GPU {position}: bus id {gpu.bus_id!r} is not a PCI bus id like '00000000:1B:00.0'"
            )
        bus_keys.append(key)
        numa = gpu.numa_node
        if numa is not None and numa > _INT32_MAX:
            raise TopologyError(f"GPU {position}: NUMA node {numa} is out of range")
        # sysfs reports -1 for "no NUMA node"; it means the same as not reported.
        numa_nodes.append(-1 if numa is None or numa < 0 else numa)
        for link in sorted(gpu.nvlinks, key=lambda link: link.index):
            if not link.active:
                continue
            remote_type = _REMOTE_CODES.get(link.remote_type)
            if remote_type is None:
                raise TopologyError(
                    f"GPU {position} NVLink {link.index}: remote type {link.remote_type!r} "
                    f"is not one of {', '.join(repr(t) for t in _REMOTE_CODES if t)}"
                )
            remote_key = -1
            if link.remote_bus_id is not None:
                parsed = bus_key(link.remote_bus_id)
                if parsed is None:
                    raise TopologyError(
                        f"GPU {position} NVLink {link.index}: remote bus id "
                        f"{link.remote_bus_id!r} is not a PCI bus id like '00000000:1B:00.0'"
                    )
                remote_key = parsed
            if remote_type == REMOTE_NOT_REPORTED and remote_key != -1:
                # The far end's type went unreported but its bus id did not: a GPU of
                # this node is a GPU, anything else an NVLink peer can be is an NVSwitch.
                # Guessing "no link" instead would relabel an NVSwitch node as PCIe.
                remote_type = REMOTE_GPU if remote_key in gpu_keys else REMOTE_SWITCH
            links.extend((position, link.index, remote_type, remote_key))
    return TopologyInput(
        gpu_count=n,
        bus_keys=bus_keys.tobytes(),
        numa_nodes=numa_nodes.tobytes(),
        levels=_pair_levels(facts, n),
        links=links.tobytes(),
        p2p=_p2p_records(facts, n),
    )


def _p2p_records(facts: NodeFacts, n: int) -> bytes:
    """The pairs with NVLink P2P ``ok``, sorted; a pair naming no GPUs or listed twice is an error."""
    seen: set[tuple[int, int]] = set()
    for entry in facts.nvlink_p2p:
        pair = (entry.a, entry.b)
        if not (0 <= entry.a < entry.b < n):
            raise TopologyError(
                f"NVLink P2P pair ({entry.a}, {entry.b}) does not name two GPU indices "
                f"a < b below {n}"
            )
        if pair in seen:
            raise TopologyError(f"NVLink P2P pair ({entry.a}, {entry.b}) is listed twice")
        seen.add(pair)
    ok = sorted((e.a, e.b) for e in facts.nvlink_p2p if e.status == "ok")
    return array("q", [value for pair in ok for value in pair]).tobytes()


def pair_offset(a: int, b: int, n: int) -> int:
    """Offset of the pair ``a < b`` in the packed upper triangle of an ``n``-GPU node."""
    return a * (2 * n - a - 1) // 2 + (b - a - 1)


def _pair_levels(facts: NodeFacts, n: int) -> bytes:
    levels = bytearray([LEVEL_NOT_REPORTED]) * (n * (n - 1) // 2)
    values = PCI_LEVELS
    # The offset of (a, b) is row_start[a] + b: one list lookup instead of arithmetic per
    # pair, which matters at 1024 GPUs (half a million pairs).
    row_start = [a * (2 * n - a - 1) // 2 - a - 1 for a in range(n)]
    for pair in facts.pci_pairs:
        a, b = pair.a, pair.b
        value = values.get(pair.level)
        if value is None or not (0 <= a < b < n):
            _raise_bad_pair(a, b, n, pair.level)
        offset = row_start[a] + b
        if levels[offset] != LEVEL_NOT_REPORTED:
            raise TopologyError(f"PCI pair ({a}, {b}) is listed twice")
        levels[offset] = value
    return bytes(levels)


def _raise_bad_pair(a: int, b: int, n: int, level: object) -> NoReturn:
    if not (0 <= a < b < n):
        raise TopologyError(f"PCI pair ({a}, {b}) does not name two GPU indices a < b below {n}")
    raise TopologyError(
        f"PCI pair ({a}, {b}): level {level!r} is not one NVML returns ({', '.join(PCI_LEVELS)})"
    )
