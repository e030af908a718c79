"""Property tests: the C builder and the Python twin agree exactly on random machines.

Machines are drawn with random PCI trees (NUMA nodes, root complexes, chains of
bridges), unreported pairs, and NVLink wirings: none, point to point (symmetric or
one-sided), switched (one or more fabrics, shared switches, GB200's one bus id),
and mixtures with inactive, IBM NPU and untyped links and links to GPUs outside the
node; NVLink P2P facts of random pairs and statuses (joining switch fabrics like
trunks); up to 64 GPUs. Raw compact
buffers, corrupt or not, must give the same result or the same error from both.
Every topology label of every random machine must be a valid Kubernetes label.

The rest of the path is held to its twin the same way: the C encoder (facts → compact
input) must give the Python encoder's bytes on every random machine, and on random
machines with one fault (a bad level, bus id, index, pair, remote type; a value of
the wrong type) the same error type and message; the C matrix cells and annotation
rows must equal the Python ones on random planes, invalid level codes included.
"""

from __future__ import annotations

import dataclasses
import random
from array import array
from typing import Literal, get_args

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gfd.base.errors import TopologyError
from gfd.facts import (
    P2P_STATUSES,
    Gpu,
    NodeFacts,
    NvLink,
    NvLinkP2P,
    NvLinkRemoteType,
    P2PStatus,
    PciLevel,
    PciPair,
)
from gfd.labels.rules import key_problem, value_problem
from gfd.labels.topology import topology_labels
from gfd.topology import (
    Topology,
    build_from_input,
    build_topology,
    render_table,
    to_annotation,
    topology_input,
    topology_to_json,
)
from gfd.topology.compact import TopologyInput
from gfd.topology.model import LEVEL_NAMES, TopologySummary
from gfd.topology.render import matrix_rows, run_length_rows
from tests.topology.conftest import c_encodes

# The default run stays under a couple of seconds per test; the slow-marked twins of each
# property search much longer (run them with ``-m slow``, as CI does with the full suite).
QUICK = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
THOROUGH = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Wiring = Literal["none", "p2p", "switched", "gb200", "mixed"]


def pci_level(a: tuple[int, int, tuple[int, ...]], b: tuple[int, int, tuple[int, ...]]) -> PciLevel:
    """Common ancestor of two GPUs at (NUMA node, root complex, bridge path)."""
    if a[0] != b[0]:
        return "system"
    if a[1] != b[1]:
        return "node"
    shared = 0
    for left, right in zip(a[2], b[2], strict=False):
        if left != right:
            break
        shared += 1
    if shared == 0:
        return "hostbridge"
    if shared == len(a[2]) == len(b[2]):
        return "single"
    return "multiple"


def bus_id(key: int) -> str:
    return f"{key >> 16:08X}:{(key >> 8) & 0xFF:02X}:{(key >> 3) & 0x1F:02X}.{key & 7}"


def random_links(
    rng: random.Random, n: int, wiring: Wiring, buses: list[str]
) -> list[list[tuple[bool, str | None, NvLinkRemoteType | None]]]:
    """Per GPU: (active, remote bus id, remote type) of each link, in link order."""
    links: list[list[tuple[bool, str | None, NvLinkRemoteType | None]]] = [[] for _ in range(n)]
    if wiring in ("p2p", "mixed"):
        for _ in range(rng.randint(0, 3 * n)):
            a, b = rng.randrange(n), rng.randrange(n)
            if a == b:
                continue
            count = rng.randint(1, 4)
            typed: NvLinkRemoteType | None = rng.choice(["gpu", "gpu", "gpu", None, "unknown"])
            for _ in range(count):
                links[a].append((True, buses[b], typed))
                if rng.random() < 0.9:
                    links[b].append((True, buses[a], typed))
    if wiring in ("switched", "mixed"):
        fabrics = rng.randint(1, 3)
        switches = [
            [f"0000{0xE0 + fabric:04X}:{switch:02X}:00.0" for switch in range(rng.randint(1, 6))]
            for fabric in range(fabrics)
        ]
        for gpu in range(n):
            if rng.random() < 0.15:
                continue
            fabric = rng.randrange(fabrics)
            for _ in range(rng.randint(1, 18)):
                pool = switches[fabric] if rng.random() < 0.95 else rng.choice(switches)
                links[gpu].append((True, rng.choice(pool), "switch"))
    if wiring == "gb200":
        for gpu in range(n):
            links[gpu].extend([(True, "FFFFFFFF:FF:FF.0", "switch")] * rng.choice([18, 18, 9]))
    if wiring == "mixed":
        for gpu in range(n):
            if rng.random() < 0.2:
                links[gpu].append((True, "00000000:FE:00.0", "ibmnpu"))
            if rng.random() < 0.2:
                links[gpu].append((False, rng.choice([None, "00000000:FD:00.0"]), "gpu"))
            if rng.random() < 0.1:
                links[gpu].append((True, None, rng.choice(["gpu", None, "switch"])))
    if wiring in ("p2p", "switched", "mixed"):
        # GPUs outside the node: a VM given some GPUs of NVLink-bridged groups.
        for gpu in range(n):
            if rng.random() < 0.1:
                outside = f"0000{0xD0 + rng.randrange(2):04X}:{gpu % 256:02X}:00.0"
                links[gpu].extend([(True, outside, "gpu")] * rng.randint(1, 4))
    return links


def random_p2p(rng: random.Random, n: int) -> list[NvLinkP2P]:
    """NVLink P2P facts of random GPU pairs, mostly ``ok`` (which joins switch fabrics)."""
    if n < 2 or rng.random() < 0.4:
        return []
    statuses: list[P2PStatus] = list(P2P_STATUSES)  # type: ignore[arg-type]
    pairs = {tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.randint(1, 2 * n))}
    entries = [
        NvLinkP2P(a=a, b=b, status="ok" if rng.random() < 0.7 else rng.choice(statuses))
        for a, b in pairs
    ]
    rng.shuffle(entries)
    return entries


@st.composite
def machines(draw: st.DrawFn, max_gpus: int = 64) -> NodeFacts:
    n = draw(st.integers(1, 8) | st.integers(1, max_gpus))
    wiring: Wiring = draw(st.sampled_from(["none", "p2p", "switched", "gb200", "mixed"]))
    rng = draw(st.randoms(use_true_random=False))
    numa_count = rng.randint(1, 4)
    places = [
        (
            rng.randrange(numa_count),
            rng.randrange(2),
            tuple(rng.randrange(2) for _ in range(rng.randint(0, 3))),
        )
        for _ in range(n)
    ]
    keys = rng.sample(range(1 << 20), n)
    buses = [bus_id(key) for key in keys]
    missing_rate = rng.choice([0.0, 0.0, 0.05, 0.5])
    links = random_links(rng, n, wiring, buses)
    gpus = []
    for gpu in range(n):
        numa: int | None = places[gpu][0] if rng.random() < 0.9 else rng.choice([None, -1])
        nvlinks = [
            NvLink(index=index, active=active, remote_bus_id=remote, remote_type=kind)
            for index, (active, remote, kind) in enumerate(links[gpu])
        ]
        rng.shuffle(nvlinks)  # facts need not list links in index order
        gpus.append(
            Gpu(
                index=gpu,
                name="Random GPU",
                uuid=f"GPU-{gpu}",
                bus_id=buses[gpu],
                numa_node=numa,
                nvlinks=tuple(nvlinks),
            )
        )
    pairs = []
    for a in range(n):
        for b in range(a + 1, n):
            if rng.random() < missing_rate:
                continue
            level = "internal" if rng.random() < 0.02 else pci_level(places[a], places[b])
            pairs.append(PciPair(a=a, b=b, level=level))
    rng.shuffle(pairs)
    return NodeFacts(gpus=tuple(gpus), pci_pairs=tuple(pairs), nvlink_p2p=tuple(random_p2p(rng, n)))


def check_invariants(topology: Topology) -> None:
    n = topology.gpu_count
    matrix = topology.matrix()
    for a in range(n):
        assert matrix[a][a] == "X"
        for b in range(n):
            assert topology.levels[a * n + b] == topology.levels[b * n + a]
            assert LEVEL_NAMES[topology.levels[a * n + b]] in (
                "X" if a == b else ("PIX", "PXB", "PHB", "NODE", "SYS", "N/A")
            )
    assert len(topology.outside_nvlinks) == n
    members = [gpu for domain in topology.domains for gpu in domain.gpus]
    assert len(members) == len(set(members))
    for domain in topology.domains:
        assert len(domain.gpus) >= 2
        assert list(domain.gpus) == sorted(domain.gpus)
        pairs_linked = all(
            matrix[a][b].startswith("NV") for a in domain.gpus for b in domain.gpus if a != b
        )
        assert domain.all_to_all == pairs_linked
    nv_cells = [matrix[a][b].startswith("NV") for a in range(n) for b in range(n) if a != b]
    interconnect = topology.summary.interconnect
    if interconnect in ("nvswitch", "nvlink"):
        assert all(nv_cells)
    if interconnect == "pcie":
        assert not any(nv_cells)
    if interconnect == "nvlink-partial":
        assert any(nv_cells) and not all(nv_cells)


def builders_agree_on(facts: NodeFacts) -> None:
    encoded = topology_input(facts, implementation="c")
    assert encoded == topology_input(facts, implementation="python")
    assert c_encodes(facts), "the C encoder handed valid facts to the Python one"
    c = build_topology(facts, implementation="c")
    python = build_topology(facts, implementation="python")
    assert c == python
    assert topology_to_json(c) == topology_to_json(python, implementation="python")
    assert to_annotation(c) == to_annotation(python, implementation="python")
    assert render_table(c, facts) == render_table(python, facts, implementation="python")
    check_invariants(c)
    event(c.summary.interconnect)
    for key, value in topology_labels(c).items():
        assert key.startswith("nvidia.com/gpu.")
        assert key_problem(key) is None, key
        assert value_problem(value) is None, (key, value)


@QUICK
@given(machines())
def test_c_and_python_agree_on_random_machines(facts: NodeFacts) -> None:
    builders_agree_on(facts)


@pytest.mark.slow
@THOROUGH
@given(machines())
def test_c_and_python_agree_on_many_random_machines(facts: NodeFacts) -> None:
    builders_agree_on(facts)


VALID_LEVELS = [0, 10, 20, 30, 40, 50, 255]
KEY_POOL = [0x100, 0x200, 0x300, 0x400, 0x500, 0x600, 7]
SWITCH_KEYS = [0xE0000, 0xE1000, 0xFFFFFFFFFFF0]


@st.composite
def compact_inputs(draw: st.DrawFn) -> TopologyInput:
    """Compact buffers that are mostly well formed, with one or two corruptions at times."""
    n = draw(st.integers(0, 6))
    corrupt = draw(st.booleans())

    def field(valid: st.SearchStrategy[int], invalid: st.SearchStrategy[int]) -> int:
        value: int = draw(valid | invalid if corrupt else valid)
        return value

    keys = draw(st.lists(st.sampled_from(KEY_POOL), min_size=n, max_size=n, unique=not corrupt))
    if corrupt and keys and draw(st.booleans()):
        keys[draw(st.integers(0, n - 1))] = draw(st.sampled_from([-1, 1 << 52]))
    numa = [field(st.integers(-1, 3), st.just(-2)) for _ in range(n)]
    pair_count = n * (n - 1) // 2
    levels = [field(st.sampled_from(VALID_LEVELS), st.integers(0, 255)) for _ in range(pair_count)]
    records = []
    for _ in range(draw(st.integers(0, 3 * n))):
        gpu = field(st.integers(0, max(n - 1, 0)), st.sampled_from([-1, n]))
        link = field(st.integers(0, 5), st.just(-1))
        kind = field(st.sampled_from([0, 0, 2, 2, 1, 254, 255]), st.sampled_from([3, 253]))
        remote = field(
            st.sampled_from([*keys, *SWITCH_KEYS, -1]) if keys else st.just(-1),
            st.sampled_from([-2, 1 << 52, 0x900]),
        )
        records.append((gpu, link, kind, remote))
    if not corrupt or draw(st.booleans()):
        records.sort(key=lambda record: (record[0], record[1]))
    flat = [value for record in records for value in record]
    p2p = []
    for _ in range(draw(st.integers(0, n))):
        a = field(st.integers(0, max(n - 1, 0)), st.sampled_from([-1, n]))
        b = field(st.integers(0, max(n - 1, 0)), st.sampled_from([-1, n]))
        p2p.append((a, b) if corrupt else (min(a, b), max(a, b)))
    if not corrupt:
        p2p = sorted({(a, b) for a, b in p2p if a != b})
    elif draw(st.booleans()):
        p2p.sort()
    p2p_flat = [value for record in p2p for value in record]
    if corrupt and p2p_flat and draw(st.booleans()):
        p2p_flat.pop()
    trim = draw(st.sampled_from([0, 0, 0, 1])) if corrupt else 0
    return TopologyInput(
        gpu_count=n,
        bus_keys=array("q", keys).tobytes()[trim:],
        numa_nodes=array("i", numa).tobytes(),
        levels=bytes(levels),
        links=array("q", flat).tobytes(),
        p2p=array("q", p2p_flat).tobytes(),
    )


def builders_agree_on_raw(compact: TopologyInput) -> None:
    outcomes: list[Topology | str] = []
    for implementation in ("c", "python"):
        try:
            outcomes.append(build_from_input(compact, implementation=implementation))
        except TopologyError as error:
            outcomes.append(str(error))
    event("built" if isinstance(outcomes[0], Topology) else "rejected")
    assert outcomes[0] == outcomes[1]


@QUICK
@given(compact_inputs())
def test_c_and_python_agree_on_raw_compact_input(compact: TopologyInput) -> None:
    builders_agree_on_raw(compact)


@pytest.mark.slow
@THOROUGH
@given(compact_inputs())
def test_c_and_python_agree_on_much_raw_compact_input(compact: TopologyInput) -> None:
    builders_agree_on_raw(compact)


# --- one fault in otherwise random facts: both encoders, same error -----------------------

Fault = Literal[
    "level-name",
    "level-unhashable",
    "pair-range",
    "pair-negative",
    "pair-reversed",
    "pair-twice",
    "pair-float",
    "bus-id",
    "bus-id-newline",
    "bus-id-not-str",
    "gpu-index",
    "numa-too-large",
    "numa-very-negative",
    "remote-type",
    "remote-bus-id",
    "link-index-none",
    "p2p-range",
]
FAULTS: tuple[Fault, ...] = get_args(Fault)


def with_fault(facts: NodeFacts, fault: Fault, rng: random.Random) -> NodeFacts:
    """``facts`` with one fault of the given kind (some kinds are valid oddities)."""
    n = len(facts.gpus)
    gpus = list(facts.gpus)
    pairs = list(facts.pci_pairs)
    gpu = rng.randrange(n)
    pick = rng.randrange(len(pairs)) if pairs else None
    if fault == "level-name" and pick is not None:
        pairs[pick] = PciPair(pairs[pick].a, pairs[pick].b, rng.choice(["bogus", "SYSTEM", ""]))  # type: ignore[arg-type]
    elif fault == "level-unhashable" and pick is not None:
        pairs[pick] = PciPair(pairs[pick].a, pairs[pick].b, ["system"])  # type: ignore[arg-type]
    elif fault == "pair-range":
        pairs.insert(rng.randrange(len(pairs) + 1), PciPair(0, n, "system"))
    elif fault == "pair-negative":
        pairs.append(PciPair(-1, 0, "node"))
    elif fault == "pair-reversed" and n >= 2:
        pairs.append(PciPair(1, 0, "node"))
    elif fault == "pair-twice" and pick is not None:
        pairs.append(PciPair(pairs[pick].a, pairs[pick].b, "single"))
    elif fault == "pair-float" and pick is not None:
        pairs[pick] = PciPair(float(pairs[pick].a), pairs[pick].b, pairs[pick].level)  # type: ignore[arg-type]
    elif fault == "bus-id":
        bad = rng.choice(["1B:00.0", "00000000:1B:00.8", "0000:1G:00.0", "", "00000000:1B:00.0 "])
        gpus[gpu] = dataclasses.replace(gpus[gpu], bus_id=bad)
    elif fault == "bus-id-newline":
        # The reference's `$` also matches before a final newline: an oddity, not an error.
        gpus[gpu] = dataclasses.replace(gpus[gpu], bus_id=gpus[gpu].bus_id + "\n")
    elif fault == "bus-id-not-str":
        gpus[gpu] = dataclasses.replace(gpus[gpu], bus_id=None)  # type: ignore[arg-type]
    elif fault == "gpu-index":
        gpus[gpu] = dataclasses.replace(gpus[gpu], index=gpu + rng.choice([1, -1, n]))
    elif fault == "numa-too-large":
        gpus[gpu] = dataclasses.replace(gpus[gpu], numa_node=2**31 + rng.randrange(2**40))
    elif fault == "numa-very-negative":
        gpus[gpu] = dataclasses.replace(gpus[gpu], numa_node=-(2**70))
    elif fault in ("remote-type", "remote-bus-id", "link-index-none"):
        links = list(gpus[gpu].nvlinks)
        place = rng.randrange(len(links) + 1)
        if fault == "remote-type":
            link = NvLink(7, True, None, rng.choice(["nvswitch", "GPU", 3]))  # type: ignore[arg-type]
        elif fault == "remote-bus-id":
            link = NvLink(7, True, rng.choice(["switch-7", "63:00.0"]), "switch")
        else:
            link = NvLink(None, True, None, "gpu")  # type: ignore[arg-type]
        links.insert(place, link)
        gpus[gpu] = dataclasses.replace(gpus[gpu], nvlinks=tuple(links))
    elif fault == "p2p-range":
        return dataclasses.replace(
            facts, pci_pairs=tuple(pairs), nvlink_p2p=(NvLinkP2P(0, n, "ok"),)
        )
    return dataclasses.replace(facts, gpus=tuple(gpus), pci_pairs=tuple(pairs))


def encode_outcome(facts: NodeFacts, implementation: Literal["c", "python"]) -> object:
    try:
        return topology_input(facts, implementation=implementation)
    except Exception as error:  # the type and message are what is compared
        return (type(error), str(error))


def encoders_agree_on_faulty(facts: NodeFacts, fault: Fault, rng: random.Random) -> None:
    faulty = with_fault(facts, fault, rng)
    c = encode_outcome(faulty, "c")
    event("rejected" if isinstance(c, tuple) else "encoded")
    assert c == encode_outcome(faulty, "python")


@QUICK
@given(machines(max_gpus=24), st.sampled_from(FAULTS), st.randoms(use_true_random=False))
def test_c_and_python_encoders_agree_on_faulty_facts(
    facts: NodeFacts, fault: Fault, rng: random.Random
) -> None:
    encoders_agree_on_faulty(facts, fault, rng)


@pytest.mark.slow
@THOROUGH
@given(machines(), st.sampled_from(FAULTS), st.randoms(use_true_random=False))
def test_c_and_python_encoders_agree_on_many_faulty_facts(
    facts: NodeFacts, fault: Fault, rng: random.Random
) -> None:
    encoders_agree_on_faulty(facts, fault, rng)


# --- matrix cells and annotation rows from random planes ----------------------------------


@st.composite
def planes(draw: st.DrawFn) -> Topology:
    """A topology with random planes: level codes mostly valid (7 has no name), any counts."""
    n = draw(st.integers(0, 12))
    levels = draw(st.lists(st.integers(0, 6) | st.just(7), min_size=n * n, max_size=n * n))
    nvlinks = draw(
        st.lists(st.sampled_from([0, 0, 0, 1, 2, 18, 255]), min_size=n * n, max_size=n * n)
    )
    if draw(st.booleans()):  # runs of equal cells, as real matrices have
        levels = [levels[0] if levels else 0] * (n * n)
    summary = TopologySummary("pcie", None, None, (), ())
    return Topology(n, bytes(levels), bytes(nvlinks), (), summary)


def cell_outcome(make: object) -> object:
    try:
        return make()  # type: ignore[operator]
    except Exception as error:  # the type and message are what is compared
        return (type(error), str(error))


@QUICK
@given(planes())
def test_c_and_python_cells_agree_on_random_planes(topology: Topology) -> None:
    for make in (matrix_rows, run_length_rows):
        c = cell_outcome(lambda make=make: make(topology, implementation="c"))
        assert c == cell_outcome(lambda make=make: make(topology, implementation="python"))
