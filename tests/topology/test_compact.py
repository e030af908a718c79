"""The compact input both builders read: layout and encoding of facts, by both encoders."""

from __future__ import annotations

import dataclasses
from array import array
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfd.base.errors import TopologyError
from gfd.facts import Gpu, NodeFacts, NvLink, PciPair
from gfd.topology.compact import (
    REMOTE_GPU,
    REMOTE_NOT_REPORTED,
    REMOTE_SWITCH,
    bus_id_of_key,
    bus_key,
    pair_offset,
    topology_input,
)
from tests.topology.conftest import c_encodes

if TYPE_CHECKING:
    from gfd.topology import Implementation
    from tests.topology.conftest import MachineKit


@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFF), st.integers(0, 0xFF), st.integers(0, 7))
def test_bus_key_round_trips(domain: int, bus: int, device: int, function: int) -> None:
    bus_id = f"{domain:08X}:{bus:02X}:{device:02X}.{function}"
    key = bus_key(bus_id)
    assert key is not None and 0 <= key < 1 << 52
    assert bus_id_of_key(key) == bus_id
    assert bus_key(bus_id.lower()) == key


def test_bus_key_accepts_both_domain_widths_and_rejects_the_rest() -> None:
    assert bus_key("0000:1b:00.0") == bus_key("00000000:1B:00.0") == 0x1B000
    for bad in ("", "1B:00.0", "00000000:1B:00.8", "000000000:1B:00.0", "0000:1G:00.0"):
        assert bus_key(bad) is None, bad


def test_pairs_are_packed_row_by_row() -> None:
    n = 5
    offsets = [pair_offset(a, b, n) for a in range(n) for b in range(a + 1, n)]
    assert offsets == list(range(n * (n - 1) // 2))


def test_encoding_of_a_small_node(implementation: Implementation, kit: MachineKit) -> None:
    switch = "00000000:E0:00.0"
    gpus = [
        kit.gpu(
            0,
            [
                kit.link(7, switch, "switch"),
                kit.link(2, kit.bus(2)),
                kit.link(5, kit.bus(1), active=False),
            ],
            numa=1,
        ),
        kit.gpu(1, numa=None),
        kit.gpu(2, [kit.link(0, None, None)], numa=-1),
    ]
    levels = {(0, 1): "single", (0, 2): None, (1, 2): "system"}
    facts = kit.node(gpus, lambda a, b: levels[(a, b)])  # type: ignore[arg-type,return-value]
    compact = topology_input(facts, implementation=implementation)
    assert compact.gpu_count == 3
    assert array("q", compact.bus_keys).tolist() == [0x10000, 0x11000, 0x12000]
    assert array("i", compact.numa_nodes).tolist() == [1, -1, -1]
    assert compact.levels == bytes([10, 255, 50])
    assert array("q", compact.links).tolist() == [
        0, 2, REMOTE_GPU, 0x12000,
        0, 7, REMOTE_SWITCH, 0xE0000,
        2, 0, REMOTE_NOT_REPORTED, -1,
    ]  # fmt: skip


class LoosePair:
    """A pair of another type than PciPair: the C encoder reads it through getattr."""

    def __init__(self, a: int, b: int, level: str) -> None:
        self.a, self.b, self.level = a, b, level


class SubPair(PciPair):
    """A PciPair subclass with a __dict__ of its own; its fields are still PciPair's slots."""


def two_gpus(**changes: object) -> NodeFacts:
    gpus = (Gpu(0, "g", "u0", "00000000:01:00.0"), Gpu(1, "g", "u1", "00000000:02:00.0"))
    facts = NodeFacts(gpus=gpus, pci_pairs=(PciPair(0, 1, "node"),))
    return dataclasses.replace(facts, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "facts",
    [
        two_gpus(pci_pairs=(LoosePair(0, 1, "single"),)),
        two_gpus(pci_pairs=(SubPair(0, 1, "multiple"),)),
        two_gpus(pci_pairs=(PciPair(False, True, "system"),)),  # bools compare as ints
        two_gpus(gpus=(Gpu(0, "g", "u0", "00000000:01:00.0\n"), Gpu(1, "g", "u1", "0000:02:00.7"))),
        two_gpus(gpus=(Gpu(0, "g", "u0", "0000000a:ff:1F.0", numa_node=-(2**80)),
                       Gpu(1, "g", "u1", "00000000:02:00.0", numa_node=2**31 - 1))),
    ],
    ids=["other-pair-type", "pair-subclass", "bool-indices", "bus-id-spellings", "numa-edges"],
)  # fmt: skip
def test_both_encoders_give_the_same_bytes_for_odd_but_valid_facts(facts: NodeFacts) -> None:
    assert topology_input(facts) == topology_input(facts, implementation="python")


def test_the_c_encoder_encodes_what_it_is_given_in_the_declared_types(kit: MachineKit) -> None:
    for facts in (kit.dgx_a100(), kit.dgx1_v100(), two_gpus(), NodeFacts()):
        assert c_encodes(facts)
        assert topology_input(facts) == topology_input(facts, implementation="python")


@pytest.mark.parametrize(
    ("facts", "error", "message"),
    [
        (two_gpus(pci_pairs=(PciPair(0, 1, "bogus"),)), TopologyError,  # type: ignore[arg-type]
         "PCI pair (0, 1): level 'bogus' is not one NVML returns"),
        (two_gpus(pci_pairs=(PciPair(1, 0, "node"),)), TopologyError,
         "PCI pair (1, 0) does not name two GPU indices a < b below 2"),
        (two_gpus(pci_pairs=(PciPair(0, 2**70, "node"),)), TopologyError,
         f"PCI pair (0, {2**70}) does not name two GPU indices a < b below 2"),
        (two_gpus(pci_pairs=(PciPair(0, 1, "node"), PciPair(0, 1, "node"))), TopologyError,
         "PCI pair (0, 1) is listed twice"),
        (two_gpus(pci_pairs=(PciPair(0, 1, ["node"]),)), TypeError,  # type: ignore[arg-type]
         "unhashable type: 'list'"),
        (two_gpus(gpus=(Gpu(0, "g", "u0", "00000000:01:00.0"), Gpu(1, "g", "u1", "1:00.0"))),
         TopologyError, "GPU 1: bus id '1:00.0' is not a PCI bus id like '00000000:1B:00.0'"),
        (two_gpus(gpus=(Gpu(0, "g", "u0", "00000000:01:00.0", numa_node=2**31),)),
         TopologyError, f"GPU 0: NUMA node {2**31} is out of range"),
        (two_gpus(gpus=(Gpu(0, "g", "u0", "00000000:01:00.0",
                            nvlinks=(NvLink(0, True, "00000000:01:00.0", "nvswitch"),)),)),  # type: ignore[arg-type]
         TopologyError, "GPU 0 NVLink 0: remote type 'nvswitch' is not one of 'gpu', 'ibmnpu', "
         "'switch', 'unknown'"),
        (two_gpus(gpus=(Gpu(0, "g", "u0", "00000000:01:00.0",
                            nvlinks=(NvLink(3, True, "switch-7", "switch"),)),)),
         TopologyError, "GPU 0 NVLink 3: remote bus id 'switch-7' is not a PCI bus id"),
    ],
    ids=["level", "reversed", "huge-index", "twice", "unhashable-level", "bus-id", "numa",
         "remote-type", "remote-bus-id"],
)  # fmt: skip
def test_both_encoders_raise_the_same_error(
    facts: NodeFacts, error: type[Exception], message: str
) -> None:
    assert not c_encodes(facts)  # the C encoder leaves every error to the Python one
    for implementation in ("c", "python"):
        with pytest.raises(error) as caught:
            topology_input(facts, implementation=implementation)  # type: ignore[arg-type]
        assert str(caught.value).startswith(message)
        assert type(caught.value) is error
