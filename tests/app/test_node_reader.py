"""The node reader: each absent optional NVML fact logged once per process, not per
cycle; a simulated node read from the simulated machine alone; and a machine without
NVML's library told how to run gfd anyway."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest

from gfd.app.exit_status import EXIT_FAILED
from gfd.app.node_reader import NO_NVML_HINT, NodeReader, facts_source
from gfd.base.errors import NvmlNotReady
from gfd.config import Settings
from gfd.facts import VgpuInfo
from gfd.facts.pci import PCI_DEVICES
from gfd.nvml.vgpu import read_vgpu
from gfd.sim import load_profile, simulate
from gfd.sim.pci_config import config_space
from tests.host import gfd_main as main


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


@pytest.mark.parametrize(
    "command",
    [
        ["--health-checks", "none"],
        ["--oneshot", "-o", "-", "--health-checks", "none"],
        ["labels"],
        ["facts"],
        ["topo"],
    ],
)
def test_no_nvml_library_says_how_to_run_gfd_anyway(command: list[str], tmp_path: Path) -> None:
    """A machine without the driver's library (here: a driver root holding none): one line
    that names what to do on a GPU node and without one, from every subcommand."""
    empty_root = tmp_path / "driver-root"
    empty_root.mkdir()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["--driver-root-ctr-path", str(empty_root), *command],
            env={},
            stdout=io.StringIO(),
        )
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines
    (line,) = lines
    assert code == EXIT_FAILED
    assert line.startswith(
        "gfd: error: NVML load failed: NVML_ERROR_LIBRARY_NOT_FOUND (code 12) "
        f"(no loadable libnvidia-ml.so.1 under the driver root {empty_root} "
    )
    assert f"; {NO_NVML_HINT})" in line
    assert "--simulate PROFILE" in NO_NVML_HINT and "--driver-root-ctr-path" in NO_NVML_HINT
    assert "gfd --help" in NO_NVML_HINT


def test_a_simulators_library_that_fails_to_load_gets_no_driver_hint(tmp_path: Path) -> None:
    """The hint is about the driver's library; a simulator library is gfd's own."""
    read = NodeReader(
        sysfs_root=tmp_path,
        machine_type_file=tmp_path / "absent",
        library_path=tmp_path / "no-such-libnvmlsim.so",
    )
    with pytest.raises(NvmlNotReady) as failed:
        read()
    assert failed.value.name == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert NO_NVML_HINT not in str(failed.value)


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
