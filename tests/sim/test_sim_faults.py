"""Fault injection: injected call errors, lost GPUs, a driver that is not loaded yet."""

from __future__ import annotations

import ctypes
import dataclasses
import re
from types import ModuleType

import pynvml
import pytest

from gfd.facts import FactsError
from gfd.sim import CallError, Faults, GpuLost, SimulationProfile, load_profile
from tests.sim import simulate_raw

from .test_sim_nvml import nvml_fails


def with_faults(name: str, faults: Faults) -> SimulationProfile:
    return dataclasses.replace(load_profile(name), faults=faults)


def test_call_error_for_every_gpu(nvml: ModuleType) -> None:
    faults = Faults(errors=(CallError(call="nvmlDeviceGetName", code=999),))
    with simulate_raw(with_faults("pcie-l4x4", faults)):
        nvml.nvmlInit()
        for index in range(4):
            with nvml_fails(pynvml.NVML_ERROR_UNKNOWN):
                nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(index))
        assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(0)).startswith("GPU-")
        nvml.nvmlShutdown()


def test_call_error_for_one_gpu_and_a_limited_number_of_times(nvml: ModuleType) -> None:
    faults = Faults(errors=(CallError(call="nvmlDeviceGetMemoryInfo", code=15, gpu=2, times=2),))
    with simulate_raw(with_faults("pcie-l4x4", faults)):
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        assert nvml.nvmlDeviceGetMemoryInfo(handles[1]).total > 0
        for _ in range(2):
            with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
                nvml.nvmlDeviceGetMemoryInfo(handles[2])
        assert nvml.nvmlDeviceGetMemoryInfo(handles[2]).total > 0
        nvml.nvmlShutdown()


def test_system_call_error_and_pair_call_error(nvml: ModuleType) -> None:
    faults = Faults(
        errors=(
            CallError(call="nvmlSystemGetDriverVersion", code=pynvml.NVML_ERROR_NO_PERMISSION),
            CallError(call="nvmlDeviceGetTopologyCommonAncestor", code=999, gpu=3),
        )
    )
    with simulate_raw(with_faults("pcie-l4x4", faults)):
        nvml.nvmlInit()
        with nvml_fails(pynvml.NVML_ERROR_NO_PERMISSION):
            nvml.nvmlSystemGetDriverVersion()
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        assert nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == 40
        with nvml_fails(pynvml.NVML_ERROR_UNKNOWN):
            nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[3])
        with nvml_fails(pynvml.NVML_ERROR_UNKNOWN):
            nvml.nvmlDeviceGetTopologyCommonAncestor(h[3], h[2])
        nvml.nvmlShutdown()


def test_gpu_lost_after_n_calls_and_stays_lost(nvml: ModuleType) -> None:
    faults = Faults(gpu_lost=(GpuLost(gpu=1, after_calls=3),))
    with simulate_raw(with_faults("pcie-l4x4", faults)):
        nvml.nvmlInit()
        gpu1 = nvml.nvmlDeviceGetHandleByIndex(1)  # call 1 on GPU 1
        nvml.nvmlDeviceGetName(gpu1)  # 2
        nvml.nvmlDeviceGetUUID(gpu1)  # 3
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetMemoryInfo(gpu1)
        nvml.nvmlShutdown()
        nvml.nvmlInit()  # counters and the loss survive a re-init
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetHandleByIndex(1)
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetHandleByPciBusId("00000000:61:00.0")
        assert nvml.nvmlDeviceGetCount() == 4
        gpu0 = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetName(gpu0) == "NVIDIA L4"
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetTopologyCommonAncestor(gpu0, gpu1)
        nvml.nvmlShutdown()


def test_driver_not_loaded_for_the_first_inits(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    faults = Faults(driver_not_loaded_inits=2)
    with simulate_raw(with_faults("t4-single", faults)):
        with nvml_fails(pynvml.NVML_ERROR_DRIVER_NOT_LOADED):
            nvml.nvmlInit()
        assert lib.nvmlInit_v2() == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
        nvml.nvmlInit()
        assert nvml.nvmlDeviceGetCount() == 1
        nvml.nvmlShutdown()
        nvml.nvmlInit()
        nvml.nvmlShutdown()


def test_init_itself_can_fail(nvml: ModuleType) -> None:
    faults = Faults(errors=(CallError(call="nvmlInitWithFlags", code=18, times=1),))
    with simulate_raw(with_faults("t4-single", faults)):
        with nvml_fails(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH):
            nvml.nvmlInit()
        nvml.nvmlInit()
        nvml.nvmlShutdown()


def test_reconfiguring_resets_counters(nvml: ModuleType) -> None:
    profile = with_faults(
        "t4-single",
        Faults(
            errors=(CallError(call="nvmlDeviceGetName", code=999, times=1),),
            gpu_lost=(GpuLost(gpu=0, after_calls=2),),
            driver_not_loaded_inits=1,
        ),
    )
    for _ in range(2):
        with simulate_raw(profile):
            with nvml_fails(pynvml.NVML_ERROR_DRIVER_NOT_LOADED):
                nvml.nvmlInit()
            nvml.nvmlInit()
            handle = nvml.nvmlDeviceGetHandleByIndex(0)
            with nvml_fails(pynvml.NVML_ERROR_UNKNOWN):
                nvml.nvmlDeviceGetName(handle)
            with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
                nvml.nvmlDeviceGetName(handle)
            nvml.nvmlShutdown()


@pytest.mark.parametrize(
    ("faults", "field"),
    [
        (Faults(errors=(CallError(call="nvmlNope", code=999),)), "faults.errors[0].call"),
        (Faults(errors=(CallError(call="nvmlDeviceGetName", code=-1),)), "faults.errors[0].error"),
        (
            Faults(errors=(CallError(call="nvmlDeviceGetName", code=3, gpu=1),)),
            "faults.errors[0].gpu",
        ),
        (Faults(gpu_lost=(GpuLost(gpu=0, after_calls=-2),)), "faults.gpu_lost[0].after_calls"),
        (Faults(driver_not_loaded_inits=-1), "faults.driver_not_loaded_inits"),
    ],
)
def test_faults_built_in_code_are_validated(faults: Faults, field: str) -> None:
    profile = SimulationProfile(facts=load_profile("t4-single").facts, faults=faults)
    with pytest.raises(FactsError, match=re.escape(f"<profile>: {field}: ")), simulate_raw(profile):
        pass
