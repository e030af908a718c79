"""Rendering: the nvidia-smi table, plain JSON and the node annotation, for both paths.

Each test builds and renders with one implementation (the C extension, or the
Python twins throughout), as the parametrised ``implementation`` fixture says.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from gfd.base.errors import TopologyError
from gfd.topology import (
    matrix_from_annotation,
    render_table,
    render_topology,
    to_annotation,
    topology_to_json,
)
from gfd.topology.synthetic import generated_machine

if TYPE_CHECKING:
    from gfd.topology import Implementation
    from tests.topology.conftest import Build, MachineKit

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_table_has_the_nvidia_smi_layout(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    facts = kit.hgx_h100()
    table = render_table(build(facts), facts, implementation=implementation)
    lines = table.splitlines()
    assert lines[0].split("\t") == [
        "",
        *(f"GPU{i}" for i in range(8)),
        "CPU Affinity",
        "NUMA Affinity",
        "GPU NUMA ID",
    ]
    assert lines[1].split("\t") == ["GPU0", " X ", *["NV18"] * 7, "0-47,96-143", "0", "N/A"]
    assert lines[8].split("\t") == ["GPU7", *["NV18"] * 7, " X ", "48-95,144-191", "1", "N/A"]
    assert "\n".join(lines[9:]) + "\n" == LEGEND


def test_table_of_a_single_gpu_without_affinity(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    facts = kit.node([kit.gpu(0)])
    assert render_table(build(facts), facts, implementation=implementation) == (
        "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tN/A\tN/A\tN/A\n" + LEGEND
    )


def test_table_explains_na_only_when_present(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    facts = kit.node([kit.gpu(0), kit.gpu(1)], lambda a, b: None)
    table = render_table(build(facts), facts, implementation=implementation)
    assert "GPU0\t X \tN/A\t" in table
    assert table.endswith("  N/A  = Connection level not reported by NVML\n")
    assert "N/A  =" not in render_table(
        build(kit.rtx4090x8()), kit.rtx4090x8(), implementation=implementation
    )


def test_table_refuses_facts_of_another_node(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    with pytest.raises(TopologyError, match="cannot render a 8-GPU topology with facts of 1 GPUs"):
        render_table(build(kit.hgx_h100()), kit.t4_single(), implementation=implementation)


def test_json_has_matrix_domains_and_summary(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    document = topology_to_json(build(kit.dgx1_v100()), implementation=implementation)
    assert json.loads(json.dumps(document)) == document
    assert document["gpu_count"] == 8
    assert document["matrix"][0] == ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    assert document["domains"] == [
        {"gpus": [0, 1, 2, 3, 4, 5, 6, 7], "all_to_all": False, "nvswitch": False}
    ]
    assert document["summary"] == {
        "interconnect": "nvlink-partial",
        "weakest_link": "SYS",
        "min_nvlinks": 0,
        "pcie_worst": "SYS",
        "numa_nodes": [0, 1],
        "gpus_per_numa_node": {"0": 4, "1": 4},
    }


def test_render_topology_picks_the_format(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    facts = kit.t4_single()
    topology = build(facts)
    assert render_topology(
        topology, facts, fmt="table", implementation=implementation
    ) == render_table(topology, facts, implementation=implementation)
    assert json.loads(
        render_topology(topology, facts, fmt="json", implementation=implementation)
    ) == topology_to_json(topology, implementation=implementation)
    with pytest.raises(ValueError, match="unknown topology format 'yaml'"):
        render_topology(topology, facts, fmt="yaml")  # type: ignore[arg-type]


def test_annotation_is_compact_and_round_trips(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    topology = build(kit.dgx_a100())
    text = to_annotation(topology, implementation=implementation)
    assert json.loads(text)["matrix"][2] == "NV12*2 X NV12*5"
    assert len(text) < 400
    assert matrix_from_annotation(text) == topology.matrix()
    mesh = build(kit.dgx1_v100())
    assert (
        matrix_from_annotation(to_annotation(mesh, implementation=implementation)) == mesh.matrix()
    )


@pytest.mark.parametrize("wiring", ["nvswitch", "mesh"])
def test_annotation_size_for_72_gpus(
    build: Build, implementation: Implementation, wiring: str
) -> None:
    topology = build(generated_machine(72, wiring=wiring))  # type: ignore[arg-type]
    text = to_annotation(topology, implementation=implementation)
    assert len(text.encode()) < 16 * 1024
    assert matrix_from_annotation(text) == topology.matrix()


def test_annotation_leaves_out_a_matrix_over_the_limit(
    build: Build, implementation: Implementation, kit: MachineKit
) -> None:
    topology = build(kit.dgx1_v100())
    full = to_annotation(topology, implementation=implementation)
    text = to_annotation(topology, max_bytes=100, implementation=implementation)
    document = json.loads(text)
    assert document["matrix"] is None
    assert document["matrix_bytes"] == len(full)
    assert document["interconnect"] == "nvlink-partial"
    assert matrix_from_annotation(text) is None


def test_annotation_parser_rejects_other_documents() -> None:
    with pytest.raises(TopologyError, match="not a version 1 topology annotation"):
        matrix_from_annotation('{"v": 2}')
