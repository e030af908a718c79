"""The NVML reader against the simulator: absent facts, error names, and NVML always shut down."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from gfd.base.errors import NvmlError, NvmlGpuLost, NvmlNotReady
from gfd.facts import NodeFacts
from gfd.facts.pci import sysfs_bus_id
from gfd.nvml.reader import read_facts
from gfd.sim import SimulationProfile, load_profile, simulate
from gfd.sim.faults import CallError, Faults, GpuLost

NOT_SUPPORTED = 3
UNKNOWN = 999


@contextmanager
def reading(profile: SimulationProfile) -> Iterator[tuple[object, NodeFacts | Exception]]:
    with simulate(profile) as machine:
        try:
            result: NodeFacts | Exception = read_facts(
                library_path=machine.library_path,
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
            )
        except NvmlError as exc:
            result = exc
        yield machine, result


def with_faults(base: str, **faults: object) -> SimulationProfile:
    return replace(load_profile(base), faults=Faults(**faults))  # type: ignore[arg-type]


def assert_nvml_shut_down() -> None:
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_not_supported_reads_as_absent() -> None:
    profile = with_faults(
        "dgx-h100",
        errors=(
            CallError("nvmlDeviceGetMemoryInfo", NOT_SUPPORTED),
            CallError("nvmlDeviceGetCpuAffinity", NOT_SUPPORTED, gpu=2),
        ),
    )
    with reading(profile) as (_, facts):
        assert isinstance(facts, NodeFacts)
        assert all(g.memory_total_bytes is None for g in facts.gpus)
        assert facts.gpus[2].cpu_affinity is None
        assert facts.gpus[1].cpu_affinity == "0-47,96-143"
        assert_nvml_shut_down()


def test_an_nvml_error_carries_its_name_and_nvml_is_shut_down() -> None:
    with reading(
        with_faults("dgx-h100", errors=(CallError("nvmlDeviceGetName", UNKNOWN, gpu=5),))
    ) as (_, error):
        assert isinstance(error, NvmlError)
        assert error.name == "NVML_ERROR_UNKNOWN" and error.call == "nvmlDeviceGetName"
        assert "NVML_ERROR_UNKNOWN" in str(error)
        assert_nvml_shut_down()


def test_gpu_lost_mid_read() -> None:
    with reading(with_faults("dgx-a100", gpu_lost=(GpuLost(gpu=4, after_calls=3),))) as (_, error):
        assert isinstance(error, NvmlGpuLost)
        assert error.name == "NVML_ERROR_GPU_IS_LOST"
        assert_nvml_shut_down()


def test_driver_not_loaded_then_loaded() -> None:
    profile = with_faults("t4-single", driver_not_loaded_inits=1)
    with simulate(profile) as machine:
        kwargs = dict(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        with pytest.raises(NvmlNotReady, match="NVML_ERROR_DRIVER_NOT_LOADED"):
            read_facts(**kwargs)  # type: ignore[arg-type]
        assert read_facts(**kwargs) == profile.facts  # type: ignore[arg-type]


def test_missing_library_is_not_ready(tmp_path: Path) -> None:
    with pytest.raises(NvmlNotReady, match="LIBRARY_NOT_FOUND"):
        read_facts(
            library_path=tmp_path / "libnvidia-ml.so.1",
            sysfs_root=tmp_path,
            machine_type_file=tmp_path / "dmi",
        )


def test_unreadable_sysfs_and_dmi_read_as_absent(tmp_path: Path) -> None:
    with simulate("pcie-l4x4") as machine:
        facts = read_facts(
            library_path=machine.library_path,
            sysfs_root=tmp_path,
            machine_type_file=tmp_path / "absent",
        )
    assert facts.machine_type is None
    assert all(g.pci_class is None and g.numa_node is None for g in facts.gpus)


def test_sysfs_bus_id_form() -> None:
    assert sysfs_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert sysfs_bus_id("00000001:C3:00.1") == "0001:c3:00.1"
