"""The PCI device's NUMA node, and the one-node machine whose firmware names none.

A real H200 in a virtual machine (``tests/records/real-gpu/h200-580.159.04``): sysfs gives
``numa_node`` -1 for every PCI device, node 0 is the only one online, and ``nvidia-smi
topo -m`` prints NUMA affinity 0. gfd reads the same: with one node online, -1 means that
node; with several, the device's node stays unknown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.nvml.device import NUMA_NODES_ONLINE
from gfd.nvml.reader import read_facts
from gfd.sim import simulate

REAL_H200 = Path(__file__).parents[1] / "records" / "real-gpu" / "h200-580.159.04" / "facts.yaml"


def read_with_nodes_online(tmp_path: Path, online: str | None) -> list[int | None]:
    with simulate(str(REAL_H200)) as machine:
        if online is not None:
            path = machine.sysfs_root / NUMA_NODES_ONLINE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(online + "\n", encoding="ascii")
        facts = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=tmp_path / "absent",
        )
    return [gpu.numa_node for gpu in facts.gpus]


def test_the_capture_has_no_node_from_sysfs() -> None:
    assert "numa_node: null" in REAL_H200.read_text()


def test_one_node_online_is_the_node_of_a_device_sysfs_leaves_unnamed(tmp_path: Path) -> None:
    assert read_with_nodes_online(tmp_path, "0") == [0]


@pytest.mark.parametrize("online", [None, "0-1", "0,2", "", "x"])
def test_several_nodes_none_or_unreadable_leave_it_unknown(
    tmp_path: Path, online: str | None
) -> None:
    assert read_with_nodes_online(tmp_path, online) == [None]


def test_a_node_sysfs_names_is_taken_as_it_is(tmp_path: Path) -> None:
    with simulate("dgx-h100") as machine:
        path = machine.sysfs_root / NUMA_NODES_ONLINE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("0\n", encoding="ascii")
        facts = read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=tmp_path / "absent",
        )
    assert sorted({gpu.numa_node for gpu in facts.gpus}) == [0, 1]
