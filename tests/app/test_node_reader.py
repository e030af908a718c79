"""The node reader logs each absent optional NVML fact once per process, not per cycle, and a
simulated node is read from the simulated machine alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gfd.app.node_reader import NodeReader, facts_source
from gfd.config import Settings
from gfd.facts import VgpuInfo
from gfd.nvml.vgpu import read_vgpu
from gfd.pci import PCI_DEVICES
from gfd.sim import load_profile, simulate
from gfd.sim.pci_config import config_space


class RecordingLog:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def debug(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, "log_level": "debug", **fields})


def test_absent_facts_are_logged_once_per_cause() -> None:
    # Driver 535: no nvmlDeviceGetNumaNodeId, no ...FabricInfoV (fabric through the v1 call).
    facts = dataclasses.replace(load_profile("dgx1-v100").facts, driver_version="535.261.03")
    with simulate(facts) as machine:
        read = NodeReader(
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            library_path=machine.library_path,
            log=RecordingLog(),
        )
        for _ in range(3):
            assert read() == facts
    logs = read.log.lines
    absent = [(e["call"], e["cause"]) for e in logs if e["event"] == "NVML fact absent"]
    # Three reads, one line per (call, cause): the V100 has no MIG and no fabric either.
    assert len(absent) == len(set(absent))
    assert {
        ("nvmlDeviceGetGpuFabricInfoV", "NVML_ERROR_FUNCTION_NOT_FOUND"),
        ("nvmlDeviceGetNumaNodeId", "NVML_ERROR_FUNCTION_NOT_FOUND"),
        ("nvmlDeviceGetMigMode", "NVML_ERROR_NOT_SUPPORTED"),
    } <= set(absent)
    assert all(e["log_level"] == "debug" for e in logs if e["event"] == "NVML fact absent")


def test_a_simulated_node_is_read_from_its_own_tree_never_the_hosts(tmp_path: Path) -> None:
    """Under --simulate the host's sysfs and DMI file (the settings' paths) are not read:
    a host that is a vGPU guest, and names another machine, changes nothing."""
    host = tmp_path / "host-sys"
    device = host / PCI_DEVICES / "0000:07:00.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x10de\n")
    (device / "class").write_text("0x030200\n")
    guest = VgpuInfo(present=True, host_driver_version="550.54.16", host_driver_branch="r550_00")
    (device / "config").write_bytes(config_space(0x20B0, 0x030200, guest))
    dmi = tmp_path / "product_name"
    dmi.write_text("HOST-MACHINE\n")
    assert read_vgpu(host) == guest  # what a reader pointed at the host would see
    settings = Settings(simulate="t4-single", sysfs_root=str(host), machine_type_file=str(dmi))
    with facts_source(settings) as read:
        facts = read()
    assert facts == load_profile("t4-single").facts
