"""Malformed input: facts no topology can be built from, and corrupt compact input.

Facts-level problems are caught while encoding or by the builder; compact-level ones
only by the builder, so those tests call each builder directly and the last test
checks that both give the same message for the same corruption.
"""

from __future__ import annotations

import re
from array import array
from typing import TYPE_CHECKING

import pytest

from gfd.base.errors import TopologyError
from gfd.facts import Gpu, NodeFacts, PciPair
from gfd.topology import build_from_input, topology_input
from gfd.topology.compact import REMOTE_GPU, REMOTE_SWITCH, TopologyInput

if TYPE_CHECKING:
    from gfd.topology import Implementation
    from tests.topology.conftest import Build, MachineKit


def test_gpu_link_to_itself(build: Build, kit: MachineKit) -> None:
    gpus = [kit.gpu(0, [kit.link(5, kit.bus(0))])]
    with pytest.raises(TopologyError, match=r"GPU 0 \(00000000:10:00.0\) NVLink 5: the remote end"):
        build(kit.node(gpus))


def test_switch_links_may_name_any_bus_id(build: Build, kit: MachineKit) -> None:
    # GB200 reports FFFFFFFF:FF:FF.0 for every link: not a GPU, and not an error.
    assert build(kit.gb200_tray()).summary.interconnect == "nvswitch"


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        (
            NodeFacts(pci_pairs=(PciPair(0, 1, "bogus"),),  # type: ignore[arg-type]
                      gpus=(Gpu(0, "g", "u0", "00000000:01:00.0"),
                            Gpu(1, "g", "u1", "00000000:02:00.0"))),
            "PCI pair (0, 1): level 'bogus' is not one NVML returns (internal, single, "
            "multiple, hostbridge, node, system)",
        ),
        (
            NodeFacts(pci_pairs=(PciPair(0, 2, "system"),),
                      gpus=(Gpu(0, "g", "u0", "00000000:01:00.0"),
                            Gpu(1, "g", "u1", "00000000:02:00.0"))),
            "PCI pair (0, 2) does not name two GPU indices a < b below 2",
        ),
        (
            NodeFacts(pci_pairs=(PciPair(0, 1, "system"), PciPair(0, 1, "node")),
                      gpus=(Gpu(0, "g", "u0", "00000000:01:00.0"),
                            Gpu(1, "g", "u1", "00000000:02:00.0"))),
            "PCI pair (0, 1) is listed twice",
        ),
        (
            NodeFacts(gpus=(Gpu(0, "g", "u0", "1B:00.0"),)),
            "GPU 0: bus id '1B:00.0' is not a PCI bus id like '00000000:1B:00.0'",
        ),
        (
            NodeFacts(gpus=(Gpu(1, "g", "u0", "00000000:01:00.0"),)),
            "GPU at position 0 has index 1; GPU indices must be 0..N-1 in order",
        ),
        (
            NodeFacts(gpus=(Gpu(0, "g", "u0", "00000000:01:00.0"),
                            Gpu(1, "g", "u1", "0000:01:00.0"))),
            "GPUs 0 and 1 have the same PCI bus id 00000000:01:00.0",
        ),
    ],
    ids=["level-name", "pair-range", "pair-twice", "bus-id", "index", "same-bus"],
)  # fmt: skip
def test_malformed_facts(build: Build, facts: NodeFacts, message: str) -> None:
    with pytest.raises(TopologyError, match=f"^{re.escape(message)}$"):
        build(facts)


def test_unknown_remote_type_name(build: Build, kit: MachineKit) -> None:
    gpus = [kit.gpu(0, [kit.link(2, kit.bus(1), "nvswitch")]), kit.gpu(1)]  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="GPU 0 NVLink 2: remote type 'nvswitch' is not one"):
        build(kit.node(gpus))


def test_malformed_remote_bus_id(build: Build, kit: MachineKit) -> None:
    gpus = [kit.gpu(0, [kit.link(1, "switch-7", "switch")])]
    with pytest.raises(TopologyError, match="GPU 0 NVLink 1: remote bus id 'switch-7' is not"):
        build(kit.node(gpus))


def test_duplicate_link_index(build: Build, kit: MachineKit) -> None:
    gpus = [kit.gpu(0, [kit.link(4, kit.bus(1)), kit.link(4, kit.bus(1))]), kit.gpu(1)]
    with pytest.raises(TopologyError, match="^GPU 0 lists NVLink 4 twice$"):
        build(kit.node(gpus))


def test_more_active_links_than_a_cell_holds(build: Build, kit: MachineKit) -> None:
    links = [kit.link(k, kit.bus(1)) for k in range(256)]
    with pytest.raises(TopologyError, match="^GPU 0 reports more than 255 active NVLinks$"):
        build(kit.node([kit.gpu(0, links), kit.gpu(1)]))
    # 255 is still fine.
    assert build(kit.node([kit.gpu(0, links[:255]), kit.gpu(1)])).cell(0, 1) == "NV255"


# --- corrupt compact input, straight into each builder ----------------------------------


def compact(
    n: int,
    *,
    keys: list[int] | None = None,
    numa: list[int] | None = None,
    levels: bytes | None = None,
    links: list[int] = (),  # type: ignore[assignment]
) -> TopologyInput:
    return TopologyInput(
        gpu_count=n,
        bus_keys=array(
            "q", keys if keys is not None else [0x100 * (i + 1) for i in range(n)]
        ).tobytes(),
        numa_nodes=array("i", numa if numa is not None else [0] * n).tobytes(),
        levels=levels if levels is not None else bytes([50]) * (n * (n - 1) // 2),
        links=array("q", links).tobytes(),
    )


CORRUPT = [
    (compact(5000), "a topology has 0 to 4096 GPUs, got 5000"),
    (compact(-1), "a topology has 0 to 4096 GPUs, got -1"),
    (
        TopologyInput(2, b"\0" * 15, b"\0" * 8, b"\x32", b""),
        "compact input bus_keys holds 15 bytes; 2 GPUs need 16",
    ),
    (
        TopologyInput(2, array("q", [1, 2]).tobytes(), b"\0" * 4, b"\x32", b""),
        "compact input numa_nodes holds 4 bytes; 2 GPUs need 8",
    ),
    (compact(3, levels=b"\x32"), "compact input levels holds 1 bytes; 3 GPUs need 3"),
    (
        TopologyInput(1, array("q", [1]).tobytes(), b"\0" * 4, b"", b"\0" * 31),
        "compact input links holds 31 bytes, not a multiple of the 32-byte link record",
    ),
    (compact(2, keys=[5, -5]), "GPU 1: bus key -5 is not a PCI address"),
    (compact(2, keys=[1 << 52, 5]), f"GPU 0: bus key {1 << 52} is not a PCI address"),
    (
        compact(3, keys=[0x1B000, 7, 0x1B000]),
        "GPUs 0 and 2 have the same PCI bus id 00000000:1B:00.0",
    ),
    (compact(2, numa=[0, -2]), "GPU 1: NUMA node -2 is not valid (-1 means unknown)"),
    (
        compact(4, levels=bytes([50, 50, 50, 40, 15, 50])),
        "GPUs 1 and 3: common-ancestor level 15 is not one NVML returns (0, 10, 20, 30, 40, 50)",
    ),
    (compact(3, levels=bytes([50, 255, 60])), "GPUs 1 and 2: common-ancestor level 60 is not"),
    (
        compact(2, links=[2, 0, REMOTE_GPU, 0x100]),
        "NVLink record 0 names GPU 2, but the node has 2 GPUs",
    ),
    (compact(2, links=[0, -1, REMOTE_GPU, 0x200]), "GPU 0: NVLink index -1 is negative"),
    (
        compact(2, links=[1, 0, REMOTE_GPU, 0x100, 0, 0, REMOTE_GPU, 0x200]),
        "NVLink records must be sorted by GPU and link index (GPU 0 link 0 follows GPU 1 link 0)",
    ),
    (
        compact(2, links=[0, 3, REMOTE_GPU, 0x200, 0, 1, REMOTE_GPU, 0x200]),
        "NVLink records must be sorted by GPU and link index (GPU 0 link 1 follows GPU 0 link 3)",
    ),
    (
        compact(2, links=[0, 0, 7, 0x200]),
        "GPU 0 NVLink 0: remote type 7 is not an NVML remote device type",
    ),
    (
        compact(2, links=[0, 0, REMOTE_SWITCH, -2]),
        "GPU 0 NVLink 0: remote bus key -2 is not a PCI address",
    ),
]


@pytest.mark.parametrize(("corrupt", "message"), CORRUPT, ids=[m[:40] for _, m in CORRUPT])
def test_corrupt_compact_input(
    implementation: Implementation, corrupt: TopologyInput, message: str
) -> None:
    with pytest.raises(TopologyError, match=f"^{re.escape(message)}"):
        build_from_input(corrupt, implementation=implementation)


def test_both_builders_report_the_same_first_problem() -> None:
    # Several problems at once: the checks run in the same order in both builders.
    corrupt = compact(3, keys=[1, 1, 2], numa=[-5, 0, 0], levels=bytes([1, 2, 3]))
    messages = []
    for implementation in ("c", "python"):
        with pytest.raises(TopologyError) as caught:
            build_from_input(corrupt, implementation=implementation)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] == "GPUs 0 and 1 have the same PCI bus id 00000000:00:00.1"


def test_unknown_implementation_is_refused(kit: MachineKit) -> None:
    with pytest.raises(ValueError, match="unknown topology implementation 'rust'"):
        build_from_input(topology_input(kit.t4_single()), implementation="rust")  # type: ignore[arg-type]
