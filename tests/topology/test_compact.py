"""The compact input both builders read: layout and encoding of facts."""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from gfd.topology.compact import (
    REMOTE_GPU,
    REMOTE_NOT_REPORTED,
    REMOTE_SWITCH,
    bus_id_of_key,
    bus_key,
    pair_offset,
    topology_input,
)

if TYPE_CHECKING:
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


def test_encoding_of_a_small_node(kit: MachineKit) -> None:
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
    compact = topology_input(kit.node(gpus, lambda a, b: levels[(a, b)]))  # type: ignore[arg-type,return-value]
    assert compact.gpu_count == 3
    assert array("q", compact.bus_keys).tolist() == [0x10000, 0x11000, 0x12000]
    assert array("i", compact.numa_nodes).tolist() == [1, -1, -1]
    assert compact.levels == bytes([10, 255, 50])
    assert array("q", compact.links).tolist() == [
        0, 2, REMOTE_GPU, 0x12000,
        0, 7, REMOTE_SWITCH, 0xE0000,
        2, 0, REMOTE_NOT_REPORTED, -1,
    ]  # fmt: skip
