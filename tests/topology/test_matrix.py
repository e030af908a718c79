"""Whole-matrix, domain and summary assertions on hand-made machines, for both builders."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gfd.facts import NodeFacts
from gfd.topology import NvLinkDomain, TopologySummary

if TYPE_CHECKING:
    from tests.topology.conftest import Build, MachineKit


def grid(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def uniform(n: int, cell: str) -> list[list[str]]:
    return [["X" if a == b else cell for b in range(n)] for a in range(n)]


DGX1_V100 = grid("""
X   NV1 NV1 NV2 NV2 SYS SYS SYS
NV1 X   NV2 NV1 SYS NV2 SYS SYS
NV1 NV2 X   NV2 SYS SYS NV1 SYS
NV2 NV1 NV2 X   SYS SYS SYS NV1
NV2 SYS SYS SYS X   NV1 NV1 NV2
SYS NV2 SYS SYS NV1 X   NV2 NV1
SYS SYS NV1 SYS NV1 NV2 X   NV2
SYS SYS SYS NV1 NV2 NV1 NV2 X
""")

K80_PCIE_TREE = grid("""
X   PIX SYS SYS SYS SYS SYS SYS
PIX X   SYS SYS SYS SYS SYS SYS
SYS SYS X   PIX PHB PHB PHB PHB
SYS SYS PIX X   PHB PHB PHB PHB
SYS SYS PHB PHB X   PIX PXB PXB
SYS SYS PHB PHB PIX X   PXB PXB
SYS SYS PHB PHB PXB PXB X   PIX
SYS SYS PHB PHB PXB PXB PIX X
""")

ALL_EIGHT = (0, 1, 2, 3, 4, 5, 6, 7)

PUBLISHED = {
    "dgx_a100": (
        uniform(8, "NV12"),
        (NvLinkDomain(gpus=ALL_EIGHT, all_to_all=True, nvswitch=True),),
        TopologySummary("nvswitch", 12, None, (1, 3, 5, 7), ((1, 2), (3, 2), (5, 2), (7, 2))),
    ),
    "hgx_h100": (
        uniform(8, "NV18"),
        (NvLinkDomain(gpus=ALL_EIGHT, all_to_all=True, nvswitch=True),),
        TopologySummary("nvswitch", 18, None, (0, 1), ((0, 4), (1, 4))),
    ),
    "dgx1_v100": (
        DGX1_V100,
        (NvLinkDomain(gpus=ALL_EIGHT, all_to_all=False, nvswitch=False),),
        TopologySummary("nvlink-partial", 0, "SYS", (0, 1), ((0, 4), (1, 4))),
    ),
    "k80_pcie_tree": (
        K80_PCIE_TREE,
        (),
        TopologySummary("pcie", 0, "SYS", (0, 1), ((0, 2), (1, 6))),
    ),
    "rtx4090x8": (
        uniform(8, "SYS"),
        (),
        TopologySummary("pcie", 0, "SYS", (0, 1), ((0, 4), (1, 4))),
    ),
    "t4_single": (
        [["X"]],
        (),
        TopologySummary("single", None, None, (0,), ((0, 1),)),
    ),
    "gb200_tray": (
        uniform(4, "NV18"),
        (NvLinkDomain(gpus=(0, 1, 2, 3), all_to_all=True, nvswitch=True),),
        TopologySummary("nvswitch", 18, None, (0, 1), ((0, 2), (1, 2))),
    ),
}


@pytest.mark.parametrize("machine", sorted(PUBLISHED))
def test_published_machines(build: Build, kit: MachineKit, machine: str) -> None:
    facts: NodeFacts = getattr(kit, machine)()
    matrix, domains, summary = PUBLISHED[machine]
    topology = build(facts)
    assert topology.matrix() == matrix
    assert topology.domains == domains
    assert topology.summary == summary


def test_weakest_link_is_the_weakest_pair(build: Build, kit: MachineKit) -> None:
    assert build(kit.dgx_a100()).summary.weakest_link == "NV12"
    assert build(kit.dgx1_v100()).summary.weakest_link == "SYS"
    assert build(kit.t4_single()).summary.weakest_link is None
    # Two GPUs with 2 links and two with 1: the weakest NVLink pair decides.
    links = kit.peer_links({(0, 1): 2, (0, 2): 1, (1, 2): 1}, 3)
    summary = build(kit.node(kit.gpu(i, links[i]) for i in range(3))).summary
    assert (summary.interconnect, summary.min_nvlinks, summary.weakest_link) == (
        "nvlink",
        1,
        "NV1",
    )


def test_no_gpus_gives_an_empty_topology(build: Build) -> None:
    topology = build(NodeFacts())
    assert topology.gpu_count == 0
    assert topology.matrix() == []
    assert topology.domains == ()
    assert topology.summary == TopologySummary("none", None, None, (), ())


def test_pairs_nvml_did_not_report_show_na_and_rank_worst(build: Build, kit: MachineKit) -> None:
    # GPU 0 and 2 have no reported level (NOT_SUPPORTED); 0-1 are NVLinked regardless.
    links = kit.peer_links({(0, 1): 4}, 3)
    facts = kit.node(
        [kit.gpu(i, links[i]) for i in range(3)],
        lambda a, b: {(0, 1): None, (0, 2): None, (1, 2): "single"}[(a, b)],
    )
    topology = build(facts)
    assert topology.matrix() == grid("""
        X   NV4 N/A
        NV4 X   PIX
        N/A PIX X
    """)
    assert topology.has_unknown_levels()
    assert topology.summary.pcie_worst == "N/A"
    assert topology.summary.interconnect == "nvlink-partial"


def test_internal_level_is_shown_as_pix(build: Build, kit: MachineKit) -> None:
    facts = kit.node([kit.gpu(0), kit.gpu(1)], lambda a, b: "internal")
    assert build(facts).matrix() == grid("X PIX\nPIX X")


def test_point_to_point_all_pairs_is_nvlink(build: Build, kit: MachineKit) -> None:
    links = kit.peer_links({(0, 1): 4, (0, 2): 4, (0, 3): 4, (1, 2): 4, (1, 3): 4, (2, 3): 4}, 4)
    topology = build(kit.node(kit.gpu(i, links[i]) for i in range(4)))
    assert topology.matrix() == uniform(4, "NV4")
    assert topology.domains == (NvLinkDomain(gpus=(0, 1, 2, 3), all_to_all=True, nvswitch=False),)
    assert topology.summary.interconnect == "nvlink"
    assert topology.summary.pcie_worst is None


def test_chain_is_one_domain_but_not_all_to_all(build: Build, kit: MachineKit) -> None:
    links = kit.peer_links({(0, 1): 2, (1, 2): 2, (3, 4): 1}, 6)
    topology = build(kit.node(kit.gpu(i, links[i]) for i in range(6)))
    assert topology.domains == (
        NvLinkDomain(gpus=(0, 1, 2), all_to_all=False, nvswitch=False),
        NvLinkDomain(gpus=(3, 4), all_to_all=True, nvswitch=False),
    )
    assert topology.summary.interconnect == "nvlink-partial"


def test_two_switch_fabrics_are_two_domains(build: Build, kit: MachineKit) -> None:
    left = ["00000000:A0:00.0", "00000000:A1:00.0"]
    right = ["00000000:B0:00.0"]
    gpus = [kit.gpu(i, kit.switch_links(6, left if i < 2 else right)) for i in range(4)]
    topology = build(kit.node(gpus, lambda a, b: "node"))
    assert topology.matrix() == grid("""
        X    NV6  NODE NODE
        NV6  X    NODE NODE
        NODE NODE X    NV6
        NODE NODE NV6  X
    """)
    assert topology.domains == (
        NvLinkDomain(gpus=(0, 1), all_to_all=True, nvswitch=True),
        NvLinkDomain(gpus=(2, 3), all_to_all=True, nvswitch=True),
    )
    assert topology.summary.interconnect == "nvlink-partial"


def test_switches_bridge_fabrics_through_a_shared_switch(build: Build, kit: MachineKit) -> None:
    # GPU0 reaches switch A, GPU2 switch B, GPU1 both: one fabric.
    a, b = "00000000:A0:00.0", "00000000:B0:00.0"
    gpus = [
        kit.gpu(0, kit.switch_links(2, [a])),
        kit.gpu(1, kit.switch_links(4, [a, b])),
        kit.gpu(2, kit.switch_links(2, [b])),
    ]
    topology = build(kit.node(gpus))
    assert topology.matrix() == grid("X NV2 NV2\nNV4 X NV4\nNV2 NV2 X")
    assert topology.summary.interconnect == "nvswitch"
    assert topology.summary.min_nvlinks == 2


def test_rows_count_what_each_gpu_reports(build: Build, kit: MachineKit) -> None:
    # Only GPU 0 reports its links to GPU 1 (like nvidia-smi, each row is one GPU's view).
    gpus = [kit.gpu(0, [kit.link(0, kit.bus(1)), kit.link(1, kit.bus(1))]), kit.gpu(1)]
    topology = build(kit.node(gpus, lambda a, b: "hostbridge"))
    assert topology.matrix() == grid("X NV2\nPHB X")
    assert topology.domains == (NvLinkDomain(gpus=(0, 1), all_to_all=False, nvswitch=False),)
    assert topology.summary.min_nvlinks == 0
    assert topology.summary.pcie_worst == "PHB"


def test_link_kinds_that_do_not_reach_a_gpu_are_ignored(build: Build, kit: MachineKit) -> None:
    links = [
        kit.link(0, kit.bus(1), active=False),
        kit.link(1, "00000000:99:00.0", "ibmnpu"),
        kit.link(2, "00000000:98:00.0", None),  # type not reported, names no GPU
        kit.link(3, "00000000:97:00.0", "unknown"),
        kit.link(4, None, "gpu"),  # remote not reported
        kit.link(5, kit.bus(1), None),  # type not reported, names GPU 1: counts
        kit.link(6, kit.bus(1), "unknown"),  # likewise
    ]
    topology = build(kit.node([kit.gpu(0, links), kit.gpu(1)], lambda a, b: "single"))
    assert topology.matrix() == grid("X NV2\nPIX X")


def test_direct_and_switched_links_add_up(build: Build, kit: MachineKit) -> None:
    switch = ["00000000:E0:00.0"]
    gpus = [
        kit.gpu(0, [kit.link(0, kit.bus(1)), *kit.switch_links(3, switch)[1:]]),
        kit.gpu(1, [kit.link(0, kit.bus(0)), *kit.switch_links(3, switch)[1:]]),
    ]
    assert build(kit.node(gpus)).matrix() == grid("X NV3\nNV3 X")


def test_bus_ids_match_regardless_of_case_and_domain_width(build: Build, kit: MachineKit) -> None:
    gpus = [
        kit.gpu(0, [kit.link(0, "0000:2a:00.0")], bus_id="00000000:1B:00.0"),
        kit.gpu(1, [kit.link(0, "00000000:1b:00.0")], bus_id="00000000:2A:00.0"),
    ]
    assert build(kit.node(gpus)).matrix() == grid("X NV1\nNV1 X")


def test_numa_summary_counts_known_nodes_only(build: Build, kit: MachineKit) -> None:
    gpus = [kit.gpu(0, numa=2), kit.gpu(1, numa=None), kit.gpu(2, numa=-1), kit.gpu(3, numa=2)]
    summary = build(kit.node(gpus)).summary
    assert summary.numa_nodes == (2,)
    assert summary.gpus_per_numa_node == ((2, 2),)


def test_cell_rejects_a_pair_outside_the_matrix(build: Build, kit: MachineKit) -> None:
    topology = build(kit.t4_single())
    assert topology.cell(0, 0) == "X"
    with pytest.raises(IndexError, match=r"\(0, 1\) is outside a 1-GPU topology"):
        topology.cell(0, 1)
