"""NVSwitch boards joined by trunks (NVLink P2P facts) and NVLinks leaving the node.

Both run against the C builder and the Python twin (the ``build`` fixture).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import pytest

from gfd.base.errors import TopologyError
from gfd.facts import NodeFacts, NvLinkP2P, P2PStatus
from gfd.labels.topology import topology_labels
from gfd.topology import build_from_input, render_table, topology_input, topology_to_json
from gfd.topology.compact import TopologyInput

if TYPE_CHECKING:
    from gfd.topology import Implementation
    from tests.topology.conftest import Build, MachineKit


def two_boards(kit: MachineKit, p2p: tuple[NvLinkP2P, ...] = ()) -> NodeFacts:
    """DGX-2 shape: 16 GPUs, 6 links each, one to each of its board's 6 NVSwitches."""
    boards = [[f"0000{0xA0 + board:04X}:{k:02X}:00.0" for k in range(6)] for board in (0, 1)]
    gpus = [kit.gpu(i, kit.switch_links(6, boards[i // 8])) for i in range(16)]
    facts = kit.node(gpus, lambda a, b: "node" if a // 8 == b // 8 else "system")
    return NodeFacts(gpus=facts.gpus, pci_pairs=facts.pci_pairs, nvlink_p2p=p2p)


def test_boards_without_p2p_facts_are_two_fabrics(build: Build, kit: MachineKit) -> None:
    topology = build(two_boards(kit))
    assert topology.cell(0, 7) == "NV6"
    assert topology.cell(0, 8) == "SYS"
    assert topology.summary.interconnect == "nvlink-partial"
    assert [d.gpus for d in topology.domains] == [tuple(range(8)), tuple(range(8, 16))]


def test_p2p_ok_across_boards_joins_the_fabrics(build: Build, kit: MachineKit) -> None:
    topology = build(two_boards(kit, (NvLinkP2P(a=0, b=8, status="ok"),)))
    assert {cell for a in range(16) for cell in topology.row(a)} == {"X", "NV6"}
    assert topology.summary.interconnect == "nvswitch"
    assert topology.summary.min_nvlinks == 6
    assert [(d.gpus, d.all_to_all, d.nvswitch) for d in topology.domains] == [
        (tuple(range(16)), True, True)
    ]
    labels = topology_labels(topology)
    assert labels["nvidia.com/gpu.interconnect"] == "nvswitch"
    assert labels["nvidia.com/gpu.nvlink.largest-domain"] == "16"
    assert labels["nvidia.com/gpu.pcie.worst"] == "none"


@pytest.mark.parametrize(
    "status", ["not-supported", "unknown", "disabled-by-regkey", "gpu-not-supported"]
)
def test_p2p_other_than_ok_changes_nothing(
    build: Build, kit: MachineKit, status: P2PStatus
) -> None:
    plain = build(two_boards(kit))
    assert build(two_boards(kit, (NvLinkP2P(a=0, b=8, status=status),))) == plain


def test_p2p_ok_of_a_gpu_without_switch_links_adds_nothing(build: Build, kit: MachineKit) -> None:
    gpus = [kit.gpu(0, [kit.link(0, kit.bus(1))]), kit.gpu(1, [kit.link(0, kit.bus(0))])]
    facts = kit.node(gpus)
    with_p2p = NodeFacts(
        gpus=facts.gpus, pci_pairs=facts.pci_pairs, nvlink_p2p=(NvLinkP2P(0, 1, "ok"),)
    )
    assert build(with_p2p) == build(facts)
    assert build(with_p2p).cell(0, 1) == "NV1"


def test_p2p_pair_naming_no_gpu_is_an_error(build: Build, kit: MachineKit) -> None:
    facts = two_boards(kit, (NvLinkP2P(a=3, b=16, status="ok"),))
    with pytest.raises(TopologyError, match=r"NVLink P2P pair \(3, 16\) does not name two GPU"):
        build(facts)
    twice = two_boards(kit, (NvLinkP2P(0, 8, "ok"), NvLinkP2P(0, 8, "unknown")))
    with pytest.raises(TopologyError, match=r"NVLink P2P pair \(0, 8\) is listed twice"):
        build(twice)


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([0, 1, 2], "compact input p2p holds 24 bytes, not a multiple of the 16-byte P2P record"),
        (
            [1, 1],
            r"NVLink P2P record 0 names GPUs \(1, 1\); expected two GPU indices a < b below 2",
        ),
        ([0, 1, 0, 1], r"\(\(0, 1\) follows \(0, 1\)\)"),
    ],
)
def test_corrupt_p2p_records(
    implementation: Implementation, records: list[int], message: str
) -> None:
    compact = TopologyInput(
        gpu_count=2,
        bus_keys=array("q", [0x100, 0x200]).tobytes(),
        numa_nodes=array("i", [0, 0]).tobytes(),
        levels=bytes([50]),
        links=b"",
        p2p=array("q", records).tobytes(),
    )
    with pytest.raises(TopologyError, match=message):
        build_from_input(compact, implementation=implementation)


def vm_with_half_a_bridged_pair(kit: MachineKit) -> NodeFacts:
    """One GPU whose 4 NVLinks end at its bridged partner, which the VM was not given."""
    partner = "00000000:77:00.0"
    return kit.node([kit.gpu(0, [kit.link(k, partner) for k in range(4)])])


def test_link_to_a_gpu_outside_the_node_is_reported_not_an_error(
    build: Build, kit: MachineKit
) -> None:
    topology = build(vm_with_half_a_bridged_pair(kit))
    assert topology.outside_nvlinks == (4,)
    assert topology.summary.interconnect == "single"
    assert topology.domains == ()
    assert topology_to_json(topology)["outside_nvlinks"] == [4]
    facts = vm_with_half_a_bridged_pair(kit)
    assert "NVLinks to GPUs outside this node: GPU0 4" in render_table(topology, facts)


def test_outside_links_count_toward_no_pair(build: Build, kit: MachineKit) -> None:
    outside = "00000000:77:00.0"
    gpus = [
        kit.gpu(0, [kit.link(0, kit.bus(1)), kit.link(1, outside), kit.link(2, outside)]),
        kit.gpu(1, [kit.link(0, kit.bus(0))]),
        kit.gpu(2),
    ]
    topology = build(kit.node(gpus))
    assert topology.outside_nvlinks == (2, 0, 0)
    assert topology.row(0) == ["X", "NV1", "SYS"]
    assert topology.summary.interconnect == "nvlink-partial"
    assert "outside this node: GPU0 2\n" in render_table(topology, kit.node(gpus))


def test_no_outside_links_no_table_line(build: Build, kit: MachineKit) -> None:
    topology = build(kit.dgx_a100())
    assert topology.outside_nvlinks == (0,) * 8
    assert "outside this node" not in render_table(topology, kit.dgx_a100())


def test_compact_input_encodes_only_ok_pairs_sorted(kit: MachineKit) -> None:
    facts = two_boards(
        kit,
        (NvLinkP2P(1, 9, "ok"), NvLinkP2P(0, 9, "not-supported"), NvLinkP2P(0, 8, "ok")),
    )
    assert array("q", topology_input(facts).p2p).tolist() == [0, 8, 1, 9]
