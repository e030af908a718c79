"""The pure-Python topology builder: the twin of the C extension ``_builder.c``.

This module owns the reference semantics of building a topology from the compact
input (:mod:`gfd.topology.compact`). ``_builder.c`` implements exactly the same
contract, checks in the same order and the same error messages; the test suite
runs every topology test against both and property tests compare them on random
machines. Change one, change the other.

Rules:

- PCIe cell of a pair: its NVML common-ancestor level (INTERNAL shown as PIX),
  ``N/A`` when NVML did not report it.
- NVLink cell ``(a, b)``: active links of GPU ``a`` whose remote is GPU ``b``, plus,
  when both GPUs have links to NVSwitches of one fabric, GPU ``a``'s switch-link
  count. A fabric is a connected group of GPUs and switches (switches are told apart
  by their bus id; GB200 reports one shared id, which makes one fabric).
- NVLink P2P ``ok`` (``nvmlDeviceGetP2PStatus`` with ``NVML_P2P_CAPS_INDEX_NVLINK``)
  between two GPUs that both have switch links joins their fabrics into one: their
  switches are joined by switch-to-switch trunks (DGX-2 / HGX-2, 16-GPU HGX A100), so
  every pair of the joined fabric counts the row GPU's switch links, as
  ``nvidia-smi topo -m`` shows NV6 for every pair of a DGX-2. Other statuses, and P2P
  ``ok`` of a GPU without switch links, change nothing.
- A link of remote type ``gpu`` whose bus id is no GPU of the node goes to a GPU
  outside the node (a VM given one GPU of an NVLink-bridged pair): it is counted per
  GPU in ``outside_nvlinks`` and toward no pair. A link whose type was not reported
  (or is ``unknown``) counts as a GPU link when its bus id names a GPU and is ignored
  otherwise; links to an IBM NPU are ignored.
- NVLink domains: connected groups of two or more GPUs with NVLink between them.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from gfd.base.errors import TopologyError
from gfd.topology.compact import (
    LINK_FIELDS,
    P2P_FIELDS,
    REMOTE_GPU,
    REMOTE_IBMNPU,
    REMOTE_NOT_REPORTED,
    REMOTE_SWITCH,
    REMOTE_UNKNOWN,
    bus_id_of_key,
)
from gfd.topology.model import (
    LEVEL_NOT_REPORTED,
    LEVEL_UNKNOWN,
    NVML_LEVEL_CODES,
    RawDomain,
    RawTopology,
)

#: Largest GPU count a builder accepts (its matrix planes take 2·N² bytes).
MAX_GPUS = 4096
#: Most active NVLinks one GPU may report: an NVLink cell is one byte.
MAX_ACTIVE_LINKS = 255
#: Bus keys are 52-bit PCI addresses (see :func:`gfd.topology.compact.bus_key`).
BUS_KEY_LIMIT = 1 << 52
_REMOTE_TYPES = frozenset(
    (REMOTE_GPU, REMOTE_IBMNPU, REMOTE_SWITCH, REMOTE_NOT_REPORTED, REMOTE_UNKNOWN)
)
_INTERCONNECT_NONE, _SINGLE, _PCIE, _NVLINK_PARTIAL, _NVLINK, _NVSWITCH = range(6)

# Translation table from an NVML level byte to a level code; invalid bytes map to 0xFF.
_LEVEL_TABLE = bytes(
    NVML_LEVEL_CODES.get(value, LEVEL_UNKNOWN if value == LEVEL_NOT_REPORTED else 0xFF)
    for value in range(256)
)


def build(
    gpu_count: int,
    bus_keys: bytes,
    numa_nodes: bytes,
    levels: bytes,
    links: bytes,
    p2p: bytes = b"",
) -> RawTopology:
    """Build the raw topology of ``gpu_count`` GPUs from the compact buffers."""
    n = gpu_count
    _check_sizes(n, bus_keys, numa_nodes, levels, links, p2p)
    keys = memoryview(bus_keys).cast("q").tolist()
    numa = memoryview(numa_nodes).cast("i").tolist()
    index_of = _index_gpus(keys)
    for gpu, node in enumerate(numa):
        if node < -1:
            raise TopologyError(f"GPU {gpu}: NUMA node {node} is not valid (-1 means unknown)")
    codes = levels.translate(_LEVEL_TABLE)
    bad = codes.find(b"\xff")
    if bad != -1:
        a, b = _pair_at(bad, n)
        raise TopologyError(
            f"GPUs {a} and {b}: common-ancestor level {levels[bad]} is not one NVML returns "
            "(0, 10, 20, 30, 40, 50)"
        )

    nvlinks = bytearray(n * n)
    switch_links = [0] * n
    fabric = list(range(n))
    switch_first_gpu: dict[int, int] = {}
    outside = bytearray(n)
    _read_links(links, n, keys, index_of, nvlinks, switch_links, fabric, switch_first_gpu, outside)
    _join_p2p_fabrics(p2p, n, switch_links, fabric)
    fabric_root = [_find(fabric, gpu) for gpu in range(n)]
    _add_switched_links(n, nvlinks, switch_links, fabric_root)

    plane = bytearray(n * n)
    pair = 0
    for a in range(n):
        row = a * n
        for b in range(a + 1, n):
            code = codes[pair]
            plane[row + b] = code
            plane[b * n + a] = code
            pair += 1

    domains, domain_of = _domains(n, nvlinks)
    all_to_all = [True] * len(domains)
    min_nvlinks = -1
    pcie_worst = -1
    any_nvlink = False
    all_nvlink = True
    for a in range(n):
        row = a * n
        own_domain = domain_of[a]
        for b in range(n):
            if a == b:
                continue
            count = nvlinks[row + b]
            if min_nvlinks < 0 or count < min_nvlinks:
                min_nvlinks = count
            if count:
                any_nvlink = True
                continue
            all_nvlink = False
            if plane[row + b] > pcie_worst:
                pcie_worst = plane[row + b]
            if own_domain >= 0 and own_domain == domain_of[b]:
                all_to_all[own_domain] = False

    raw_domains: list[RawDomain] = []
    for number, members in enumerate(domains):
        switched = all(
            switch_links[gpu] and fabric_root[gpu] == fabric_root[members[0]] for gpu in members
        )
        raw_domains.append((tuple(members), all_to_all[number], switched))

    if n == 0:
        interconnect = _INTERCONNECT_NONE
    elif n == 1:
        interconnect = _SINGLE
    elif not any_nvlink:
        interconnect = _PCIE
    elif not all_nvlink:
        interconnect = _NVLINK_PARTIAL
    elif all(switch_links[gpu] and fabric_root[gpu] == fabric_root[0] for gpu in range(n)):
        interconnect = _NVSWITCH
    else:
        interconnect = _NVLINK

    per_numa = Counter(node for node in numa if node >= 0)
    return (
        bytes(plane),
        bytes(nvlinks),
        raw_domains,
        interconnect,
        min_nvlinks,
        pcie_worst,
        tuple(sorted(per_numa.items())),
        bytes(outside),
    )


def _check_sizes(
    n: int, bus_keys: bytes, numa_nodes: bytes, levels: bytes, links: bytes, p2p: bytes
) -> None:
    if not (0 <= n <= MAX_GPUS):
        raise TopologyError(f"a topology has 0 to {MAX_GPUS} GPUs, got {n}")
    expected = (
        ("bus_keys", bus_keys, 8 * n),
        ("numa_nodes", numa_nodes, 4 * n),
        ("levels", levels, n * (n - 1) // 2),
    )
    for name, buffer, size in expected:
        if len(buffer) != size:
            raise TopologyError(
                f"compact input {name} holds {len(buffer)} bytes; {n} GPUs need {size}"
            )
    if len(links) % (8 * LINK_FIELDS):
        raise TopologyError(
            f"compact input links holds {len(links)} bytes, "
            f"not a multiple of the {8 * LINK_FIELDS}-byte link record"
        )
    if len(p2p) % (8 * P2P_FIELDS):
        raise TopologyError(
            f"compact input p2p holds {len(p2p)} bytes, "
            f"not a multiple of the {8 * P2P_FIELDS}-byte P2P record"
        )


def _index_gpus(keys: list[int]) -> dict[int, int]:
    for gpu, key in enumerate(keys):
        if not (0 <= key < BUS_KEY_LIMIT):
            raise TopologyError(f"GPU {gpu}: bus key {key} is not a PCI address")
    ordered = sorted(range(len(keys)), key=lambda gpu: (keys[gpu], gpu))
    for first, second in pairwise(ordered):
        if keys[first] == keys[second]:
            raise TopologyError(
                f"GPUs {first} and {second} have the same PCI bus id {bus_id_of_key(keys[first])}"
            )
    return {key: gpu for gpu, key in enumerate(keys)}


def _pair_at(offset: int, n: int) -> tuple[int, int]:
    a = 0
    while offset >= n - 1 - a:
        offset -= n - 1 - a
        a += 1
    return a, a + 1 + offset


def _read_links(
    links: bytes,
    n: int,
    keys: list[int],
    index_of: dict[int, int],
    nvlinks: bytearray,
    switch_links: list[int],
    fabric: list[int],
    switch_first_gpu: dict[int, int],
    outside: bytearray,
) -> None:
    """Count direct links into ``nvlinks``, switch links and links leaving the node per
    GPU; join GPUs per fabric."""
    records = memoryview(links).cast("q").tolist()
    previous_gpu, previous_link = -1, -1
    active = 0
    for start in range(0, len(records), LINK_FIELDS):
        gpu, link, remote_type, remote_key = records[start : start + LINK_FIELDS]
        if not (0 <= gpu < n):
            raise TopologyError(
                f"NVLink record {start // LINK_FIELDS} names GPU {gpu}, but the node has {n} GPUs"
            )
        if link < 0:
            raise TopologyError(f"GPU {gpu}: NVLink index {link} is negative")
        if gpu == previous_gpu and link == previous_link:
            raise TopologyError(f"GPU {gpu} lists NVLink {link} twice")
        if gpu < previous_gpu or (gpu == previous_gpu and link < previous_link):
            raise TopologyError(
                "NVLink records must be sorted by GPU and link index "
                f"(GPU {gpu} link {link} follows GPU {previous_gpu} link {previous_link})"
            )
        active = active + 1 if gpu == previous_gpu else 1
        previous_gpu, previous_link = gpu, link
        if active > MAX_ACTIVE_LINKS:
            raise TopologyError(f"GPU {gpu} reports more than {MAX_ACTIVE_LINKS} active NVLinks")
        if remote_type not in _REMOTE_TYPES:
            raise TopologyError(
                f"GPU {gpu} NVLink {link}: remote type {remote_type} "
                "is not an NVML remote device type"
            )
        if not (-1 <= remote_key < BUS_KEY_LIMIT):
            raise TopologyError(
                f"GPU {gpu} NVLink {link}: remote bus key {remote_key} is not a PCI address"
            )
        if remote_type == REMOTE_SWITCH:
            switch_links[gpu] += 1
            first = switch_first_gpu.setdefault(remote_key, gpu)
            _union(fabric, first, gpu)
            continue
        if remote_type == REMOTE_IBMNPU or remote_key < 0:
            continue
        peer = index_of.get(remote_key)
        if peer is None:
            if remote_type == REMOTE_GPU:
                # A GPU that is not on this node (a VM given one GPU of a bridged pair).
                outside[gpu] += 1
            continue
        if peer == gpu:
            raise TopologyError(
                f"GPU {gpu} ({bus_id_of_key(keys[gpu])}) NVLink {link}: "
                "the remote end is the GPU itself"
            )
        nvlinks[gpu * n + peer] += 1


def _join_p2p_fabrics(p2p: bytes, n: int, switch_links: list[int], fabric: list[int]) -> None:
    """NVLink P2P ``ok`` between GPUs with switch links joins their fabrics (trunks)."""
    records = memoryview(p2p).cast("q").tolist()
    previous = (-1, -1)
    for start in range(0, len(records), P2P_FIELDS):
        a, b = records[start], records[start + 1]
        if not (0 <= a < b < n):
            raise TopologyError(
                f"NVLink P2P record {start // P2P_FIELDS} names GPUs ({a}, {b}); "
                f"expected two GPU indices a < b below {n}"
            )
        if (a, b) <= previous:
            raise TopologyError(
                "NVLink P2P records must be sorted by GPU pair, each listed once "
                f"(({a}, {b}) follows ({previous[0]}, {previous[1]}))"
            )
        previous = (a, b)
        if switch_links[a] and switch_links[b]:
            _union(fabric, a, b)


def _add_switched_links(
    n: int, nvlinks: bytearray, switch_links: list[int], fabric_root: list[int]
) -> None:
    members: dict[int, list[int]] = {}
    for gpu in range(n):
        if switch_links[gpu]:
            members.setdefault(fabric_root[gpu], []).append(gpu)
    for group in members.values():
        for a in group:
            row = a * n
            count = switch_links[a]
            for b in group:
                if b != a:
                    nvlinks[row + b] += count


def _domains(n: int, nvlinks: bytearray) -> tuple[list[list[int]], list[int]]:
    """NVLink domains (ascending by first GPU) and each GPU's domain number (-1: none)."""
    parent = list(range(n))
    for a in range(n):
        row = a * n
        for b in range(n):
            if nvlinks[row + b] and a != b:
                _union(parent, a, b)
    groups: dict[int, list[int]] = {}
    for gpu in range(n):
        groups.setdefault(_find(parent, gpu), []).append(gpu)
    domains: list[list[int]] = []
    domain_of = [-1] * n
    for gpu in range(n):
        group = groups[_find(parent, gpu)]
        if len(group) > 1 and group[0] == gpu:
            for member in group:
                domain_of[member] = len(domains)
            domains.append(group)
    return domains, domain_of


def _find(parent: list[int], node: int) -> int:
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node


def _union(parent: list[int], a: int, b: int) -> None:
    root_a, root_b = _find(parent, a), _find(parent, b)
    # The smaller index becomes the root, so roots do not depend on the order of unions.
    if root_a < root_b:
        parent[root_b] = root_a
    elif root_b < root_a:
        parent[root_a] = root_b
