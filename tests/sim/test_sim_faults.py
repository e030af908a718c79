"""Fault injection: injected call errors, lost and vanished GPUs, NVLinks taken down, a
driver that is not loaded yet."""

from __future__ import annotations

import ctypes
import dataclasses
import re
from types import ModuleType

import pynvml
import pytest

from gfd.facts import FactsError
from gfd.sim import (
    CallError,
    Faults,
    GpuLost,
    GpuVanished,
    NvLinkDown,
    SimulationProfile,
    load_profile,
)
from tests.sim import simulate_raw

from .test_sim_nvml import link_count, nvml_fails


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


def _bus_ids(nvml: ModuleType) -> list[str]:
    count = nvml.nvmlDeviceGetCount()
    return [
        nvml.nvmlDeviceGetPciInfo_v3(nvml.nvmlDeviceGetHandleByIndex(i)).busId for i in range(count)
    ]


def test_a_vanished_gpu_is_no_longer_enumerated_and_stays_gone(
    nvml: ModuleType, lib: ctypes.CDLL
) -> None:
    facts = load_profile("pcie-l4x4").facts
    gone = facts.gpus[1]
    faults = Faults(gpu_vanished=(GpuVanished(gpu=1, after_calls=2),))
    with simulate_raw(with_faults("pcie-l4x4", faults)) as machine:
        nvml.nvmlInit()
        assert nvml.nvmlDeviceGetCount() == 4
        gpu1 = nvml.nvmlDeviceGetHandleByIndex(1)  # call 1 on GPU 1
        assert nvml.nvmlDeviceGetUUID(gpu1) == gone.uuid  # 2: the last it answers
        assert nvml.nvmlDeviceGetCount() == 3  # pynvml calls nvmlDeviceGetCount_v2
        count = ctypes.c_uint()
        assert lib.nvmlDeviceGetCount(ctypes.byref(count)) == 0 and count.value == 3
        assert _bus_ids(nvml) == [facts.gpus[i].bus_id for i in (0, 2, 3)]
        moved = nvml.nvmlDeviceGetHandleByIndex(1)
        assert nvml.nvmlDeviceGetUUID(moved) == facts.gpus[2].uuid
        assert nvml.nvmlDeviceGetIndex(moved) == 1
        assert nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByIndex(2)) == 2
        # The kernel's device nodes keep their numbers.
        assert nvml.nvmlDeviceGetMinorNumber(moved) == 2
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetHandleByIndex(3)
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlDeviceGetHandleByPciBusId(gone.bus_id)
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlDeviceGetHandleByUUID(gone.uuid)
        # A handle obtained before it vanished names a GPU that is gone.
        for call in (nvml.nvmlDeviceGetName, nvml.nvmlDeviceGetIndex):
            with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
                call(gpu1)
        gpu0 = nvml.nvmlDeviceGetHandleByIndex(0)
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetTopologyCommonAncestor(gpu0, gpu1)
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetP2PStatus(gpu0, gpu1, pynvml.NVML_P2P_CAPS_INDEX_PCI)
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetTopologyNearestGpus(gpu1, pynvml.NVML_TOPOLOGY_SYSTEM)
        # The topology of the GPUs left is as if it had never been there.
        nearest = nvml.nvmlDeviceGetTopologyNearestGpus(gpu0, pynvml.NVML_TOPOLOGY_SYSTEM)
        assert [nvml.nvmlDeviceGetUUID(h) for h in nearest] == [facts.gpus[i].uuid for i in (2, 3)]
        assert nvml.nvmlDeviceGetTopologyNearestGpus(gpu0, pynvml.NVML_TOPOLOGY_NODE) == []
        on_cpu0 = nvml.nvmlSystemGetTopologyGpuSet(0)
        assert [nvml.nvmlDeviceGetUUID(h) for h in on_cpu0] == [facts.gpus[0].uuid]
        nvml.nvmlShutdown()
        nvml.nvmlInit()  # gone for good, across a re-init
        assert nvml.nvmlDeviceGetCount() == 3
        nvml.nvmlShutdown()
        # Still on the PCI bus: its sysfs directory stays.
        device = machine.sysfs_root / "bus/pci/devices/0000:61:00.0"
        assert (device / "vendor").read_text() == "0x10de\n"
        assert (device / "class").is_file()


def test_a_gpu_vanished_from_the_start_takes_its_nvlinks_with_it(nvml: ModuleType) -> None:
    facts = load_profile("dgx1-v100").facts
    gone = facts.gpus[0].bus_id
    faults = Faults(gpu_vanished=(GpuVanished(gpu=0, after_calls=0),))
    with simulate_raw(with_faults("dgx1-v100", faults)):
        nvml.nvmlInit()
        assert _bus_ids(nvml) == [gpu.bus_id for gpu in facts.gpus[1:]]
        for new, gpu in enumerate(facts.gpus[1:]):
            handle = nvml.nvmlDeviceGetHandleByIndex(new)
            for link in gpu.nvlinks:
                state = nvml.nvmlDeviceGetNvLinkState(handle, link.index)
                if link.remote_bus_id != gone:
                    assert state == pynvml.NVML_FEATURE_ENABLED
                    continue
                # A link to the vanished GPU reads as an inactive link.
                assert state == pynvml.NVML_FEATURE_DISABLED
                with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
                    nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link.index)
                with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
                    nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link.index)
                assert nvml.nvmlDeviceGetNvLinkVersion(handle, link.index) == gpu.nvlink_version
        nvml.nvmlShutdown()


def test_the_mig_devices_of_a_vanished_gpu_vanish_with_it(nvml: ModuleType) -> None:
    facts = load_profile("dgx-a100-mig-mixed").facts
    faults = Faults(gpu_vanished=(GpuVanished(gpu=0, after_calls=0),))
    with simulate_raw(with_faults("dgx-a100-mig-mixed", faults)):
        nvml.nvmlInit()
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlDeviceGetHandleByUUID(facts.gpus[0].mig_devices[0].uuid)
        kept = nvml.nvmlDeviceGetHandleByUUID(facts.gpus[1].mig_devices[0].uuid)
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(kept)
        assert nvml.nvmlDeviceGetIndex(parent) == 0
        nvml.nvmlShutdown()


def test_vanishing_keeps_the_switch_trunks_of_a_two_board_machine(nvml: ModuleType) -> None:
    # dgx2-v100 joins its two boards by one nvlink_p2p fact, GPU 0 <-> GPU 8.
    faults = Faults(gpu_vanished=(GpuVanished(gpu=0, after_calls=0),))
    with simulate_raw(with_faults("dgx2-v100", faults)):
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(15)]
        for a, b in ((0, 7), (0, 14), (6, 7)):
            status = nvml.nvmlDeviceGetP2PStatus(
                handles[a], handles[b], pynvml.NVML_P2P_CAPS_INDEX_NVLINK
            )
            assert status == pynvml.NVML_P2P_STATUS_OK, (a, b)
        nvml.nvmlShutdown()


def test_nvlinks_go_down_after_n_calls_and_stay_down(nvml: ModuleType) -> None:
    faults = Faults(nvlink_down=(NvLinkDown(gpu=2, after_calls=3, links=(0, 3)),))
    version = load_profile("dgx-h100").facts.gpus[2].nvlink_version
    with simulate_raw(with_faults("dgx-h100", faults)):
        nvml.nvmlInit()
        gpu2 = nvml.nvmlDeviceGetHandleByIndex(2)  # call 1 on GPU 2
        assert nvml.nvmlDeviceGetNvLinkState(gpu2, 0) == pynvml.NVML_FEATURE_ENABLED  # 2
        assert nvml.nvmlDeviceGetNvLinkRemotePciInfo(gpu2, 3).busId  # 3
        for link in (0, 3):
            assert nvml.nvmlDeviceGetNvLinkState(gpu2, link) == pynvml.NVML_FEATURE_DISABLED
            # What only an active link has is not reported, as for an inactive link.
            with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
                nvml.nvmlDeviceGetNvLinkRemotePciInfo(gpu2, link)
            with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
                nvml.nvmlDeviceGetNvLinkRemoteDeviceType(gpu2, link)
            assert nvml.nvmlDeviceGetNvLinkVersion(gpu2, link) == version
        for link in (1, 2, 4, 17):
            assert nvml.nvmlDeviceGetNvLinkState(gpu2, link) == pynvml.NVML_FEATURE_ENABLED
            assert nvml.nvmlDeviceGetNvLinkRemoteDeviceType(gpu2, link) == 2  # a switch
        # The link count is the hardware's; the GPU itself still answers everything else.
        assert link_count(nvml, gpu2) == 18
        assert nvml.nvmlDeviceGetName(gpu2) == "NVIDIA H100 80GB HBM3"
        gpu1 = nvml.nvmlDeviceGetHandleByIndex(1)
        assert nvml.nvmlDeviceGetNvLinkState(gpu1, 0) == pynvml.NVML_FEATURE_ENABLED
        nvml.nvmlShutdown()
        nvml.nvmlInit()
        gpu2 = nvml.nvmlDeviceGetHandleByIndex(2)
        assert nvml.nvmlDeviceGetNvLinkState(gpu2, 3) == pynvml.NVML_FEATURE_DISABLED
        nvml.nvmlShutdown()


def test_a_gpu_with_every_link_down_leaves_the_nvlink_fabric(nvml: ModuleType) -> None:
    nvlink = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    faults = Faults(nvlink_down=(NvLinkDown(gpu=0, after_calls=0),))
    with simulate_raw(with_faults("dgx2-v100", faults)):
        nvml.nvmlInit()
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(16)]
        assert all(nvml.nvmlDeviceGetNvLinkState(h[0], link) == 0 for link in range(6))
        # GPU 0 <-> GPU 8 was given "ok" for the links as loaded; it no longer holds.
        for peer in (1, 8):
            status = nvml.nvmlDeviceGetP2PStatus(h[0], h[peer], nvlink)
            assert status == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED, peer
        # The boards' trunks are the switches', and still join the other GPUs.
        assert nvml.nvmlDeviceGetP2PStatus(h[1], h[8], nvlink) == pynvml.NVML_P2P_STATUS_OK
        assert nvml.nvmlDeviceGetP2PStatus(h[1], h[2], nvlink) == pynvml.NVML_P2P_STATUS_OK
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
        (Faults(gpu_vanished=(GpuVanished(gpu=1, after_calls=0),)), "faults.gpu_vanished[0].gpu"),
        (
            Faults(
                gpu_lost=(GpuLost(gpu=0, after_calls=1),),
                gpu_vanished=(GpuVanished(gpu=0, after_calls=1),),
            ),
            "faults.gpu_vanished[0].gpu",
        ),
        (Faults(nvlink_down=(NvLinkDown(gpu=0, after_calls=0),)), "faults.nvlink_down[0].gpu"),
    ],
)
def test_faults_built_in_code_are_validated(faults: Faults, field: str) -> None:
    profile = SimulationProfile(facts=load_profile("t4-single").facts, faults=faults)
    with pytest.raises(FactsError, match=re.escape(f"<profile>: {field}: ")), simulate_raw(profile):
        pass
