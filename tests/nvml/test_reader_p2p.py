"""NVLink P2P and NVLinks leaving the node, read through the simulator.

The reader asks ``nvmlDeviceGetP2PStatus(NVLINK)`` only between NVSwitch fabrics that
share no switch: a normal DGX/HGX node makes no such call (a fault on the call would
fail the read, and does not), a two-board DGX-2 exactly one.
"""

from __future__ import annotations

from dataclasses import replace

import pynvml
import pytest

from gfd.facts import Gpu, NodeFacts, NvLink, NvLinkP2P, P2PStatus, PciPair
from gfd.labels.topology import topology_labels
from gfd.nvml.reader import read_facts
from gfd.sim import SimulationProfile, load_profile, simulate
from gfd.sim.faults import CallError, Faults
from gfd.topology import build_topology, render_table, topology_to_json
from gfd.topology.synthetic import generated_machine

UNKNOWN = 999
FUNCTION_NOT_FOUND = 13
NOT_SUPPORTED = 3
CROSS_BOARD = NvLinkP2P(a=0, b=8, status="ok")


def read(profile: SimulationProfile | NodeFacts | str) -> NodeFacts:
    with simulate(profile) as machine:
        return read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )


def failing_p2p(base: str, code: int) -> SimulationProfile:
    return replace(
        load_profile(base), faults=Faults(errors=(CallError("nvmlDeviceGetP2PStatus", code),))
    )


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-a100", "gb200-nvl4", "dgx1-v100"])
def test_one_fabric_nodes_make_no_p2p_call(profile: str) -> None:
    # Every P2P call would fail with NVML_ERROR_UNKNOWN, which fails the read.
    facts = read(failing_p2p(profile, UNKNOWN))
    assert facts.nvlink_p2p == ()
    assert facts == load_profile(profile).facts


def test_dgx2_asks_one_pair_and_builds_nv6_everywhere() -> None:
    facts = read("dgx2-v100")
    assert facts.nvlink_p2p == (CROSS_BOARD,)
    for implementation in ("c", "python"):
        topology = build_topology(facts, implementation=implementation)  # type: ignore[arg-type]
        assert {cell for a in range(16) for cell in topology.row(a)} == {"X", "NV6"}
        labels = topology_labels(topology)
        assert labels["nvidia.com/gpu.interconnect"] == "nvswitch"
        assert labels["nvidia.com/gpu.nvlink.min-links"] == "6"
        assert labels["nvidia.com/gpu.nvlink.largest-domain"] == "16"


def test_the_simulator_derives_every_cross_board_pair_from_the_trunk() -> None:
    with simulate("dgx2-v100") as machine:
        read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        pynvml.nvmlInit()
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(16)]
            statuses = {
                pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], 2)
                for a in range(8)
                for b in range(8, 16)
            }
        finally:
            pynvml.nvmlShutdown()
    assert statuses == {pynvml.NVML_P2P_STATUS_OK}


def test_without_the_trunk_fact_the_boards_stay_apart() -> None:
    facts = replace(load_profile("dgx2-v100").facts, nvlink_p2p=())
    read_back = read(facts)
    # The simulator derives NOT_SUPPORTED across boards; the reader records it.
    assert read_back.nvlink_p2p == (NvLinkP2P(a=0, b=8, status="not-supported"),)
    topology = build_topology(read_back)
    assert topology.summary.interconnect == "nvlink-partial"
    assert topology.cell(0, 8) == "SYS"


@pytest.mark.parametrize(
    ("status", "expected"), [("disabled-by-regkey", "nvlink-partial"), ("ok", "nvswitch")]
)
def test_a_given_status_is_served_as_given(status: P2PStatus, expected: str) -> None:
    facts = replace(
        load_profile("dgx2-v100").facts, nvlink_p2p=(NvLinkP2P(a=0, b=8, status=status),)
    )
    read_back = read(facts)
    assert read_back == facts
    assert build_topology(read_back).summary.interconnect == expected


@pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND])
def test_p2p_absent_leaves_the_fact_out_not_the_read(code: int) -> None:
    facts = read(failing_p2p("dgx2-v100", code))
    assert facts.nvlink_p2p == ()
    assert build_topology(facts).summary.interconnect == "nvlink-partial"


def board_machine(boards: int, trunks: tuple[NvLinkP2P, ...]) -> NodeFacts:
    """``boards`` boards of two GPUs, each board on its own two NVSwitches."""
    gpus = []
    for gpu in range(2 * boards):
        board = gpu // 2
        links = tuple(
            NvLink(
                index=k,
                active=True,
                remote_bus_id=f"00000000:{0xC0 + 2 * board + k:02X}:00.0",
                remote_type="switch",
            )
            for k in range(2)
        )
        gpus.append(
            Gpu(
                index=gpu,
                name="Tesla V100-SXM3-32GB",
                uuid=f"GPU-{gpu:08x}-0000-0000-0000-000000000000",
                bus_id=f"00000000:{0x10 + gpu:02X}:00.0",
                nvlinks=links,
            )
        )
    pairs = tuple(
        PciPair(a=a, b=b, level="system")
        for a in range(2 * boards)
        for b in range(a + 1, 2 * boards)
    )
    return NodeFacts(
        driver_version="535.261.03", gpus=tuple(gpus), pci_pairs=pairs, nvlink_p2p=trunks
    )


def test_unjoined_fabrics_cost_one_call_per_pair_of_fabrics() -> None:
    facts = read(board_machine(4, ()))
    assert [(e.a, e.b) for e in facts.nvlink_p2p] == [
        (0, 2),
        (0, 4),
        (2, 4),
        (0, 6),
        (2, 6),
        (4, 6),
    ]
    assert {e.status for e in facts.nvlink_p2p} == {"not-supported"}


def test_joined_fabrics_cost_one_call_per_fabric_beyond_the_first() -> None:
    facts = read(
        board_machine(4, (NvLinkP2P(0, 2, "ok"), NvLinkP2P(2, 4, "ok"), NvLinkP2P(4, 6, "ok")))
    )
    # The simulator joins all four boards from those three trunks; the reader asks each
    # new board once against the first, and stops asking once it is joined.
    assert facts.nvlink_p2p == (
        NvLinkP2P(0, 2, "ok"),
        NvLinkP2P(0, 4, "ok"),
        NvLinkP2P(0, 6, "ok"),
    )
    assert build_topology(facts).summary.interconnect == "nvswitch"


def test_an_nvlink_peer_outside_the_node_is_read_and_reported() -> None:
    # A VM given GPU 0 of an NVLink-bridged pair: its 4 links end at the other GPU.
    gpu = Gpu(
        index=0,
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-00000000-0000-0000-0000-000000000000",
        bus_id="00000000:00:05.0",
        nvlinks=tuple(
            NvLink(index=k, active=True, remote_bus_id="00000000:00:06.0", remote_type="gpu")
            for k in range(4)
        ),
    )
    facts = NodeFacts(driver_version="535.261.03", gpus=(gpu,))
    read_back = read(facts)
    assert read_back.gpus[0].nvlinks == gpu.nvlinks
    topology = build_topology(read_back)
    assert topology.outside_nvlinks == (4,)
    assert topology_to_json(topology)["outside_nvlinks"] == [4]
    assert "NVLinks to GPUs outside this node: GPU0 4" in render_table(topology, read_back)
    assert topology_labels(topology)["nvidia.com/gpu.interconnect"] == "single"


def test_a_generated_machine_of_separate_boards_asks_each_pair_of_boards_once() -> None:
    # 64 GPUs on 8 boards, each board on its own NVSwitches and no trunks: 8·7/2 pairs of
    # boards, one call each, never one per GPU pair (2,016).
    facts = generated_machine(64)
    read_back = read(facts)
    assert len(read_back.nvlink_p2p) == 28
    assert {(e.a % 8, e.b % 8, e.status) for e in read_back.nvlink_p2p} == {(0, 0, "not-supported")}
    assert build_topology(read_back) == build_topology(facts)
