"""The PCIe link through the simulator: current and maximum generation and width, the GPU's
own maximum, the replay counter, and utilisation.

A GPU serves its facts' ``pcie`` as written (null parts NOT_SUPPORTED), so gfd's reader
reads back what the facts say; what the reader could not read back as written is refused
with the file and field. Which branch exports ``nvmlDeviceGetGpuMaxPcieLinkGeneration`` is
held to the export lists of NVIDIA's real libraries (470 lacks it). Every test goes
through pynvml or ctypes against the library, as the reader does.
"""

from __future__ import annotations

import ctypes
import dataclasses
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from gfd.base.errors import GfdError
from gfd.facts import FactsError, Gpu, NodeFacts, PcieLink, VgpuInfo
from gfd.nvml.branches import EMULATED_BRANCHES, driver_branch, exported_in
from gfd.sim import SimulationProfile, library_path, load_profile
from gfd.sim.branch_library import dynamic_exports, hidden_in, write_without_exports
from tests.oracles import oracle_path
from tests.sim import read_simulated, simulate_raw

from .test_sim_health import machine_file
from .test_sim_nvml import bare_gpu, nvml_fails

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED

#: Every PCIe call the simulator serves, with the fact it serves.
PCIE_CALLS = {
    "nvmlDeviceGetCurrPcieLinkGeneration": "current_generation",
    "nvmlDeviceGetCurrPcieLinkWidth": "current_width",
    "nvmlDeviceGetMaxPcieLinkGeneration": "max_generation",
    "nvmlDeviceGetMaxPcieLinkWidth": "max_width",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": "gpu_max_generation",
    "nvmlDeviceGetPcieReplayCounter": "replay_counter",
}
UTILIZATION = "nvmlDeviceGetUtilizationRates"

TRAINED_DOWN = PcieLink(
    current_generation=3,
    current_width=8,
    max_generation=5,
    max_width=16,
    gpu_max_generation=5,
    replay_counter=12,
    gpu_utilization=91,
)


def machine(*gpus: Gpu, driver: str | None = None) -> NodeFacts:
    # bare_gpu's GPUs have no display class: the reader finds no vGPU capability.
    return NodeFacts(driver_version=driver, gpus=gpus, vgpu=VgpuInfo(present=False))


def test_each_call_serves_its_fact(nvml: ModuleType) -> None:
    with simulate_raw(machine(bare_gpu(0, pcie=TRAINED_DOWN))):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        for call, fact in PCIE_CALLS.items():
            assert getattr(nvml, call)(handle) == getattr(TRAINED_DOWN, fact), call
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        assert (rates.gpu, rates.memory) == (91, 0)
        nvml.nvmlShutdown()


def test_a_gpu_without_the_block_or_a_part_answers_not_supported(nvml: ModuleType) -> None:
    width_only = PcieLink(current_width=16, max_width=16)
    with simulate_raw(machine(bare_gpu(0), bare_gpu(1, pcie=width_only))):
        nvml.nvmlInit()
        for index in (0, 1):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for call, fact in PCIE_CALLS.items():
                if index == 1 and getattr(width_only, fact) is not None:
                    assert getattr(nvml, call)(handle) == 16
                    continue
                with nvml_fails(NOT_SUPPORTED):
                    getattr(nvml, call)(handle)
            with nvml_fails(NOT_SUPPORTED):
                nvml.nvmlDeviceGetUtilizationRates(handle)
        nvml.nvmlShutdown()


def test_a_mig_device_handle_answers_not_supported(nvml: ModuleType) -> None:
    facts = load_profile("dgx-a100-mig-single").facts
    link = PcieLink(4, 16, 4, 16, 4, 0)
    gpus = (dataclasses.replace(facts.gpus[0], pcie=link), *facts.gpus[1:])
    facts = dataclasses.replace(facts, gpus=gpus)
    with simulate_raw(facts):
        nvml.nvmlInit()
        gpu = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetCurrPcieLinkWidth(gpu) == 16
        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        for call in (*PCIE_CALLS, UTILIZATION):
            with nvml_fails(NOT_SUPPORTED):
                getattr(nvml, call)(mig)
        nvml.nvmlShutdown()


def test_null_pointers_are_invalid_arguments(lib: ctypes.CDLL, tmp_path: Path) -> None:
    records = "value pcie_current_width 16\nvalue gpu_utilization 5\n"
    with machine_file(lib, tmp_path, records):
        assert lib.nvmlInit_v2() == 0
        handle = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
        for call in (*PCIE_CALLS, UTILIZATION):
            assert getattr(lib, call)(handle, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT, call
        assert lib.nvmlShutdown() == 0


def test_the_reader_reads_back_what_the_facts_say() -> None:
    healthy = PcieLink(5, 16, 5, 16, 5, 0)
    facts = machine(bare_gpu(0, pcie=healthy), bare_gpu(1, pcie=TRAINED_DOWN), bare_gpu(2))
    assert read_simulated(facts) == facts


def test_branch_470_reads_back_without_the_gpu_maximum() -> None:
    """470's library has no nvmlDeviceGetGpuMaxPcieLinkGeneration: the reader records the
    absence and reads the rest; what the link could reach is the system's maximum."""
    link = PcieLink(3, 16, 3, 16, None, 0)
    facts = machine(bare_gpu(0, pcie=link), driver="470.256.02")
    absent: dict[str, str] = {}
    assert read_simulated(facts, on_absent=absent.__setitem__) == facts
    assert absent["nvmlDeviceGetGpuMaxPcieLinkGeneration"] == "NVML_ERROR_FUNCTION_NOT_FOUND"
    assert facts.gpus[0].pcie is not None and facts.gpus[0].pcie.reachable_generation == 3


@pytest.mark.parametrize(
    ("gpu", "driver", "path", "problem"),
    [
        (bare_gpu(0, pcie=PcieLink()), None, "gpus[0].pcie", "write pcie: null"),
        (
            bare_gpu(0, pcie=PcieLink(5, 16, 5, 16, 5, 0, gpu_utilization=90)),
            None,
            "gpus[0].pcie.gpu_utilization",
            "only while current_generation is below",
        ),
        (
            bare_gpu(0, pcie=TRAINED_DOWN, mig_mode_current=True, mig_mode_pending=True),
            None,
            "gpus[0].pcie.gpu_utilization",
            "no utilisation of a MIG-enabled GPU",
        ),
        (
            bare_gpu(0, pcie=PcieLink(3, 16, 3, 16, 3, 0)),
            "470.256.02",
            "gpus[0].pcie.gpu_max_generation",
            "has no nvmlDeviceGetGpuMaxPcieLinkGeneration; set it to null or name a driver "
            "of branch 525 or later",
        ),
    ],
)
def test_what_the_reader_could_not_read_back_is_refused(
    gpu: Gpu, driver: str | None, path: str, problem: str
) -> None:
    with (
        pytest.raises(FactsError) as refused,
        simulate_raw(SimulationProfile(machine(gpu, driver=driver))),
    ):
        pass
    assert f"{path}: " in str(refused.value) and problem in str(refused.value)


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        ("value gpu_utilization 101\n", "'101' is not a value of gpu_utilization"),
        ("value pcie_current_width 4294967296\n", "is not a value of pcie_current_width"),
        ("value pcie_replay_counter -1\n", "is not a value of pcie_replay_counter"),
        ("fault_rise 0 0 pcie_current_width 1\n", "pcie_current_width is not a count"),
        ("fault_rise 0 0 gpu_utilization 1\n", "gpu_utilization is not a count"),
        ("fault_set 0 0 gpu_utilization 200\n", "'200' is not a value of gpu_utilization"),
    ],
)
def test_the_library_refuses_bad_pcie_records(
    lib: ctypes.CDLL, tmp_path: Path, records: str, problem: str
) -> None:
    with pytest.raises(GfdError, match=problem), machine_file(lib, tmp_path, records):
        pass


@pytest.mark.parametrize("branch", EMULATED_BRANCHES)
def test_each_branch_library_exports_the_pcie_calls(branch: int, tmp_path: Path) -> None:
    copy = tmp_path / "libnvidia-ml.so.1"
    write_without_exports(library_path(), copy, hidden_in(branch))
    exported = dynamic_exports(copy)
    for call in (*PCIE_CALLS, UTILIZATION):
        assert (call in exported) == exported_in(call, branch), f"branch {branch}: {call}"
    assert ("nvmlDeviceGetGpuMaxPcieLinkGeneration" in exported) == (branch >= 525)


@pytest.mark.oracle("nvml-exports")
def test_the_pcie_calls_are_exported_as_by_the_real_libraries(tmp_path: Path) -> None:
    listings = sorted(oracle_path("nvml-exports").glob("libnvidia-ml.so.*.txt"))
    assert listings, "no export list of a real library"
    for listing in listings:
        version = listing.name.removeprefix("libnvidia-ml.so.").removesuffix(".txt")
        real = set(listing.read_text().split())
        copy = tmp_path / f"{version}.so"
        write_without_exports(library_path(), copy, hidden_in(driver_branch(version)))
        simulated = dynamic_exports(copy)
        calls = (*PCIE_CALLS, UTILIZATION)
        differ = sorted(call for call in calls if (call in real) != (call in simulated))
        assert not differ, f"{version}: the simulated and the real library differ on {differ}"
