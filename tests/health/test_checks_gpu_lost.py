"""The ``gpu-lost`` check (gfd.health.checks.gpu_lost): the PCI scan and its guards, a GPU
on the bus that NVML does not list, and one that answers ``NVML_ERROR_GPU_IS_LOST``.

Expectations come from what sysfs holds for a PCI device (vendor, class, ``driver`` link,
``physfn`` of an SR-IOV virtual function), not from gfd.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from gfd.base.errors import NvmlGpuLost
from gfd.health import FAILING, GPU_LOST, OK, HealthMonitor
from gfd.health.checks.gpu_lost import PciScanner
from tests.factories import make_facts, make_gpu
from tests.health.doubles import pci_device, sysfs_for


def test_the_scan_finds_nvidia_display_controllers_that_nvml_should_see(tmp_path: Path) -> None:
    pci_device(tmp_path, "0000:1b:00.0")  # 3D controller, nvidia driver
    pci_device(tmp_path, "0000:1c:00.0", pci_class=0x030000, driver=None)  # VGA, no driver
    pci_device(tmp_path, "0000:05:00.0", pci_class=0x068000)  # an NVSwitch: a bridge
    pci_device(tmp_path, "0000:1d:00.0", driver="vfio-pci")  # passed through to a VM
    pci_device(tmp_path, "0000:1e:00.4", virtual_function=True)  # an SR-IOV VF (vGPU)
    pci_device(tmp_path, "0000:1f:00.0", vendor=0x8086, pci_class=0x030000)  # not NVIDIA
    pci_device(tmp_path, "0000:20:00.0", driver="nouveau")
    found = PciScanner(tmp_path).scan()
    assert found is not None
    assert [device.address for device in found] == ["0000:1b:00.0", "0000:1c:00.0"]


def test_a_missing_pci_tree_is_unknown_not_healthy(tmp_path: Path) -> None:
    assert PciScanner(tmp_path / "nothing").scan() is None


def test_a_device_rebound_to_vfio_drops_out_of_the_scan(tmp_path: Path) -> None:
    pci_device(tmp_path, "0000:1b:00.0")
    scanner = PciScanner(tmp_path)
    assert len(scanner.scan() or ()) == 1
    link = tmp_path / "bus/pci/devices/0000:1b:00.0/driver"
    link.unlink()
    (tmp_path / "bus/pci/drivers/vfio-pci").mkdir(parents=True)
    os.symlink(tmp_path / "bus/pci/drivers/vfio-pci", link)
    assert scanner.scan() == ()


def test_a_gpu_on_the_bus_that_nvml_no_longer_lists_is_lost(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=sysfs_for(tmp_path, 4), checks=[GPU_LOST])
    four = make_facts([make_gpu(i) for i in range(4)])
    assert monitor.observe(four).results[0].state == OK
    three = make_facts([make_gpu(0), make_gpu(1), dataclasses.replace(make_gpu(3), index=2)])
    # The GPU at bus 1e is now NVML's index 2; bus 1d is gone.
    result = monitor.observe(three).results[0]
    assert result.state == FAILING
    assert [p.message for p in result.problems] == [
        "GPU 2 (0000:1d:00.0) is on the PCI bus but NVML does not see it"
    ]


def test_a_gpu_that_answers_gpu_is_lost_is_named_by_its_index(tmp_path: Path) -> None:
    monitor = HealthMonitor(sysfs_root=sysfs_for(tmp_path, 4), checks=[GPU_LOST])
    monitor.observe(make_facts([make_gpu(i) for i in range(4)]))
    error = NvmlGpuLost("nvmlDeviceGetMemoryInfo", 15, "NVML_ERROR_GPU_IS_LOST")
    error.gpu_index = 3
    result = monitor.observe(None, error=error).results[0]
    assert result.state == FAILING
    assert result.problems[0].message == (
        "GPU 3 (0000:1e:00.0) is lost: NVML answers NVML_ERROR_GPU_IS_LOST"
    )
