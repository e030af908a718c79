"""Topology labels: whole label maps per machine, and validity of every key and value."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gfd.facts import NodeFacts
from gfd.labels.topology import topology_labels

if TYPE_CHECKING:
    from tests.topology.conftest import Build, MachineKit

EXPECTED = {
    "dgx_a100": {
        "nvidia.com/gpu.interconnect": "nvswitch",
        "nvidia.com/gpu.numa-nodes": "4",
        "nvidia.com/gpu.numa.max-gpus": "2",
        "nvidia.com/gpu.nvlink-domains": "1",
        "nvidia.com/gpu.nvlink.largest-domain": "8",
        "nvidia.com/gpu.nvlink.min-links": "12",
        "nvidia.com/gpu.pcie.worst": "none",
    },
    "hgx_h100": {
        "nvidia.com/gpu.interconnect": "nvswitch",
        "nvidia.com/gpu.numa-nodes": "2",
        "nvidia.com/gpu.numa.max-gpus": "4",
        "nvidia.com/gpu.nvlink-domains": "1",
        "nvidia.com/gpu.nvlink.largest-domain": "8",
        "nvidia.com/gpu.nvlink.min-links": "18",
        "nvidia.com/gpu.pcie.worst": "none",
    },
    "dgx1_v100": {
        "nvidia.com/gpu.interconnect": "nvlink-partial",
        "nvidia.com/gpu.numa-nodes": "2",
        "nvidia.com/gpu.numa.max-gpus": "4",
        "nvidia.com/gpu.nvlink-domains": "1",
        "nvidia.com/gpu.nvlink.largest-domain": "8",
        "nvidia.com/gpu.nvlink.min-links": "0",
        "nvidia.com/gpu.pcie.worst": "sys",
    },
    "k80_pcie_tree": {
        "nvidia.com/gpu.interconnect": "pcie",
        "nvidia.com/gpu.numa-nodes": "2",
        "nvidia.com/gpu.numa.max-gpus": "6",
        "nvidia.com/gpu.nvlink-domains": "0",
        "nvidia.com/gpu.nvlink.largest-domain": "0",
        "nvidia.com/gpu.nvlink.min-links": "0",
        "nvidia.com/gpu.pcie.worst": "sys",
    },
    "rtx4090x8": {
        "nvidia.com/gpu.interconnect": "pcie",
        "nvidia.com/gpu.numa-nodes": "2",
        "nvidia.com/gpu.numa.max-gpus": "4",
        "nvidia.com/gpu.nvlink-domains": "0",
        "nvidia.com/gpu.nvlink.largest-domain": "0",
        "nvidia.com/gpu.nvlink.min-links": "0",
        "nvidia.com/gpu.pcie.worst": "sys",
    },
    "t4_single": {
        "nvidia.com/gpu.interconnect": "single",
        "nvidia.com/gpu.numa-nodes": "1",
        "nvidia.com/gpu.numa.max-gpus": "1",
        "nvidia.com/gpu.nvlink-domains": "0",
        "nvidia.com/gpu.nvlink.largest-domain": "0",
    },
}


@pytest.mark.parametrize("machine", sorted(EXPECTED))
def test_labels_of_published_machines(build: Build, kit: MachineKit, machine: str) -> None:
    assert topology_labels(build(getattr(kit, machine)())) == EXPECTED[machine]


def test_no_gpus_no_labels(build: Build) -> None:
    assert topology_labels(build(NodeFacts())) == {}


def test_unknown_levels_and_numa(build: Build, kit: MachineKit) -> None:
    facts = kit.node([kit.gpu(0), kit.gpu(1), kit.gpu(2)], lambda a, b: "node" if a else None)
    assert topology_labels(build(facts)) == {
        "nvidia.com/gpu.interconnect": "pcie",
        "nvidia.com/gpu.nvlink-domains": "0",
        "nvidia.com/gpu.nvlink.largest-domain": "0",
        "nvidia.com/gpu.nvlink.min-links": "0",
        "nvidia.com/gpu.pcie.worst": "unknown",
    }


def test_partial_switch_fabric_labels(build: Build, kit: MachineKit) -> None:
    switches = ["00000000:A0:00.0"]
    gpus = [kit.gpu(i, kit.switch_links(12, switches) if i < 3 else ()) for i in range(4)]
    labels = topology_labels(build(kit.node(gpus, lambda a, b: "multiple")))
    assert labels["nvidia.com/gpu.interconnect"] == "nvlink-partial"
    assert labels["nvidia.com/gpu.nvlink.largest-domain"] == "3"
    assert labels["nvidia.com/gpu.pcie.worst"] == "pxb"
