"""The simulator library through the real pynvml binding: every call's values and errors."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from gfd.facts import FabricInfo, Gpu, MigDevice, NodeFacts, NvLink, PciPair
from gfd.sim import SimulationProfile, load_profile
from tests.facts_readback import cpulist_to_ids
from tests.sim import simulate_raw

MIB = 2**20
#: The dgx-a100 profile with MIG enabled in a mixed layout (a test fixture; the bundled
#: dgx-a100-mig-* profiles are other layouts).
MIG_PROFILE = str(Path(__file__).parent / "fixtures" / "dgx-a100-mig.yaml")


@contextlib.contextmanager
def nvml_fails(code: int) -> Iterator[None]:
    with pytest.raises(pynvml.NVMLError) as info:
        yield
    assert info.value.value == code, f"expected NVML error {code}, got {info.value.value}"


def bare_gpu(index: int, **fields: object) -> Gpu:
    return Gpu(
        index=index,
        name=f"Test GPU {index}",
        uuid=f"GPU-00000000-0000-0000-0000-{index:012d}",
        bus_id=f"00000000:{0x10 + index:02X}:00.0",
        **fields,  # type: ignore[arg-type]
    )


def a100_mig(
    index: int, profile: str, gi: int, ci: int = 0, ci_slices: int | None = None
) -> MigDevice:
    shapes = {
        "1g.5gb": (19, 1, 4864, 14),
        "2g.10gb": (14, 2, 9856, 28),
        "3g.20gb": (9, 3, 19968, 42),
    }
    gi_profile, slices, mib, sms = shapes[profile]
    ci_count = ci_slices if ci_slices is not None else slices
    name = profile if ci_count == slices else f"{ci_count}c.{profile}"
    return MigDevice(
        index=index,
        uuid=f"MIG-00000000-0000-0000-0000-{index:012d}",
        name=f"NVIDIA A100-SXM4-40GB MIG {name}",
        memory_total_bytes=mib * MIB,
        gpu_instance_id=gi,
        compute_instance_id=ci,
        gi_profile_id=gi_profile,
        gi_slice_count=slices,
        gi_memory_mib=mib,
        ci_slice_count=ci_count,
        multiprocessors=sms * ci_count // slices,
        copy_engines=slices,
        decoders=slices - 1,
    )


# --------------------------------------------------------------------------- init


def test_calls_before_init_are_uninitialized(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    count = ctypes.c_uint()
    with simulate_raw("t4-single"):
        assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == pynvml.NVML_ERROR_UNINITIALIZED
        assert lib.nvmlShutdown() == pynvml.NVML_ERROR_UNINITIALIZED
        with nvml_fails(pynvml.NVML_ERROR_UNINITIALIZED):
            nvml.nvmlSystemGetDriverVersion()


def test_init_is_reference_counted(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    count = ctypes.c_uint()
    with simulate_raw("t4-single"):
        nvml.nvmlInit()
        assert lib.nvmlInit_v2() == pynvml.NVML_SUCCESS
        assert lib.nvmlInit() == pynvml.NVML_SUCCESS
        assert lib.nvmlShutdown() == pynvml.NVML_SUCCESS
        assert lib.nvmlShutdown() == pynvml.NVML_SUCCESS
        assert nvml.nvmlDeviceGetCount() == 1
        nvml.nvmlShutdown()
        assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == pynvml.NVML_ERROR_UNINITIALIZED
        with nvml_fails(pynvml.NVML_ERROR_UNINITIALIZED):
            nvml.nvmlShutdown()


def test_unconfigured_library_behaves_like_a_host_without_driver(
    nvml: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The library reads the process environment at nvmlInit; make sure it is clean.
    monkeypatch.delenv("GFD_SIM_CONFIG", raising=False)
    with simulate_raw("t4-single"):
        pass
    with nvml_fails(pynvml.NVML_ERROR_DRIVER_NOT_LOADED):
        nvml.nvmlInit()


def test_error_strings(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    assert lib.nvmlErrorString(0) == b"Success"
    assert lib.nvmlErrorString(pynvml.NVML_ERROR_GPU_IS_LOST) == b"GPU is lost"
    assert lib.nvmlErrorString(pynvml.NVML_ERROR_NOT_SUPPORTED) == b"Not Supported"
    assert lib.nvmlErrorString(12345) == b"Unknown Error"
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)) == "Driver Not Loaded"


# --------------------------------------------------------------------------- system


def test_system_versions(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    with simulate_raw("dgx-h100"):
        nvml.nvmlInit()
        assert nvml.nvmlSystemGetDriverVersion() == "570.148.08"
        assert nvml.nvmlSystemGetCudaDriverVersion() == 12080
        assert nvml.nvmlSystemGetCudaDriverVersion_v2() == 12080
        assert nvml.nvmlSystemGetNVMLVersion() == "13.570.148.08"
        small = ctypes.create_string_buffer(5)
        assert lib.nvmlSystemGetDriverVersion(small, 5) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        assert lib.nvmlSystemGetDriverVersion(None, 80) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        assert lib.nvmlSystemGetCudaDriverVersion(None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        nvml.nvmlShutdown()


def test_absent_system_facts_are_not_supported(nvml: ModuleType) -> None:
    with simulate_raw(NodeFacts(gpus=(bare_gpu(0),))):
        nvml.nvmlInit()
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlSystemGetDriverVersion()
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlSystemGetCudaDriverVersion()
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- devices


def test_device_identity_matches_the_profile(nvml: ModuleType) -> None:
    profile = load_profile("dgx-h100")
    with simulate_raw(profile):
        nvml.nvmlInit()
        assert nvml.nvmlDeviceGetCount() == 8
        for gpu in profile.facts.gpus:
            handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
            assert nvml.nvmlDeviceGetName(handle) == gpu.name
            assert nvml.nvmlDeviceGetUUID(handle) == gpu.uuid
            assert nvml.nvmlDeviceGetIndex(handle) == gpu.index
            assert nvml.nvmlDeviceGetMinorNumber(handle) == gpu.index
            pci = nvml.nvmlDeviceGetPciInfo_v3(handle)
            assert pci.busId == gpu.bus_id
            assert pci.busIdLegacy == "0000" + gpu.bus_id[8:]
            assert pci.pciDeviceId == 0x233010DE
            assert (pci.domain, pci.bus, pci.device) == (0, int(gpu.bus_id[9:11], 16), 0)
            assert nvml.nvmlDeviceGetMemoryInfo(handle).total == 81559 * MIB
            memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            assert (memory.total, memory.free + memory.used + memory.reserved) == (81559 * MIB,) * 2
            assert nvml.nvmlDeviceGetCudaComputeCapability(handle) == (9, 0)
            assert nvml.nvmlDeviceGetArchitecture(handle) == pynvml.NVML_DEVICE_ARCH_HOPPER
            assert nvml.nvmlDeviceGetBrand(handle) == pynvml.NVML_BRAND_NVIDIA
            assert nvml.nvmlDeviceGetComputeMode(handle) == pynvml.NVML_COMPUTEMODE_DEFAULT
            assert nvml.nvmlDeviceGetDisplayMode(handle) == pynvml.NVML_FEATURE_DISABLED
            # A DGX H100 is bare metal.
            assert gpu.virtualization_mode == pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE
            assert nvml.nvmlDeviceGetVirtualizationMode(handle) == gpu.virtualization_mode
            assert nvml.nvmlDeviceGetMigMode(handle) == [0, 0]
        nvml.nvmlShutdown()


def test_virtualization_mode_is_the_facts_and_not_supported_without_them(
    nvml: ModuleType, lib: ctypes.CDLL
) -> None:
    modes = (
        pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE,
        pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
        pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU,
        None,
    )
    gpus = tuple(bare_gpu(i, virtualization_mode=mode) for i, mode in enumerate(modes))
    with simulate_raw(NodeFacts(gpus=gpus)):
        nvml.nvmlInit()
        for i, mode in enumerate(modes):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            if mode is None:
                with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
                    nvml.nvmlDeviceGetVirtualizationMode(handle)
            else:
                assert nvml.nvmlDeviceGetVirtualizationMode(handle) == mode
        assert (
            lib.nvmlDeviceGetVirtualizationMode(nvml.nvmlDeviceGetHandleByIndex(0), None)
            == pynvml.NVML_ERROR_INVALID_ARGUMENT
        )
        nvml.nvmlShutdown()


def test_handle_lookups(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    profile = load_profile("dgx-a100")
    with simulate_raw(profile):
        nvml.nvmlInit()
        third = nvml.nvmlDeviceGetHandleByIndex(2)
        for form in ("00000000:47:00.0", "0000:47:00.0", "0000:47:00.0".lower(), "47:00.0"):
            found = nvml.nvmlDeviceGetHandleByPciBusId(form)
            assert ctypes.addressof(found.contents) == ctypes.addressof(third.contents)
        by_uuid = nvml.nvmlDeviceGetHandleByUUID(profile.facts.gpus[2].uuid)
        assert nvml.nvmlDeviceGetIndex(by_uuid) == 2
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlDeviceGetHandleByPciBusId("00000000:48:00.0")
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetHandleByPciBusId("not a bus id")
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlDeviceGetHandleByUUID("GPU-nope")
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetHandleByIndex(8)
        assert lib.nvmlDeviceGetHandleByIndex_v2(0, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        assert lib.nvmlDeviceGetCount_v2(None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        nvml.nvmlShutdown()


def test_foreign_and_null_handles_are_invalid(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    with simulate_raw("t4-single"):
        nvml.nvmlInit()
        bogus = pynvml.c_nvmlDevice_t()  # NULL
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetName(bogus)
        stray = ctypes.cast(ctypes.create_string_buffer(64), pynvml.c_nvmlDevice_t)
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetUUID(stray)
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        for call in (
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetArchitecture",
            "nvmlDeviceGetBrand",
            "nvmlDeviceGetPciInfo_v3",
            "nvmlDeviceGetComputeMode",
            "nvmlDeviceGetNumaNodeId",
        ):
            assert getattr(lib, call)(handle, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT, call
        assert lib.nvmlDeviceGetCudaComputeCapability(handle, None, None) == 2
        small = ctypes.create_string_buffer(4)
        assert lib.nvmlDeviceGetName(handle, small, 4) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        assert lib.nvmlDeviceGetUUID(handle, small, 4) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        nvml.nvmlShutdown()


def test_absent_device_facts_are_not_supported(nvml: ModuleType) -> None:
    with simulate_raw(NodeFacts(driver_version="550.1", gpus=(bare_gpu(0),))):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetPciInfo_v3(handle).pciDeviceId == 0
        for call in (
            nvml.nvmlDeviceGetMemoryInfo,
            nvml.nvmlDeviceGetCudaComputeCapability,
            nvml.nvmlDeviceGetArchitecture,
            nvml.nvmlDeviceGetBrand,
            nvml.nvmlDeviceGetNumaNodeId,
            nvml.nvmlDeviceGetMigMode,
        ):
            with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
                call(handle)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetCpuAffinity(handle, 64)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(pynvml.c_nvmlGpuFabricInfoV_t()))
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetNvLinkState(handle, 0)
        nvml.nvmlShutdown()


def test_memory_v2_checks_the_struct_version(nvml: ModuleType) -> None:
    with simulate_raw("t4-single"):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        with nvml_fails(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH):
            nvml.nvmlDeviceGetMemoryInfo(handle, version=0x01000028)
        nvml.nvmlShutdown()


def test_display_mode_follows_the_pci_class(nvml: ModuleType) -> None:
    with simulate_raw("rtx4090x8"):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetDisplayMode(handle) == pynvml.NVML_FEATURE_ENABLED
        assert nvml.nvmlDeviceGetBrand(handle) == pynvml.NVML_BRAND_GEFORCE
        nvml.nvmlShutdown()


def test_gpu_numa_id_is_served_when_known(nvml: ModuleType) -> None:
    facts = NodeFacts(gpus=(bare_gpu(0, gpu_numa_id=1, numa_node=0),))
    with simulate_raw(facts):
        nvml.nvmlInit()
        assert nvml.nvmlDeviceGetNumaNodeId(nvml.nvmlDeviceGetHandleByIndex(0)) == 1
        nvml.nvmlShutdown()


def test_cpu_affinity_bitmask(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    profile = load_profile("dgx-a100")
    with simulate_raw(profile):
        nvml.nvmlInit()
        for gpu in profile.facts.gpus:
            words = nvml.nvmlDeviceGetCpuAffinity(nvml.nvmlDeviceGetHandleByIndex(gpu.index), 64)
            cpus = [w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1]
            assert gpu.cpu_affinity is not None
            assert cpus == cpulist_to_ids(gpu.cpu_affinity)
        handle = nvml.nvmlDeviceGetHandleByIndex(0)  # CPUs 48-63,176-191
        one_word = nvml.nvmlDeviceGetCpuAffinity(handle, 1)
        assert one_word[0] == 0xFFFF << 48
        assert lib.nvmlDeviceGetCpuAffinity(handle, 0, one_word) == 2
        assert lib.nvmlDeviceGetCpuAffinity(handle, 4, None) == 2
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- topology


def test_common_ancestor_serves_every_pair(nvml: ModuleType) -> None:
    profile = load_profile("k80-pcie-tree")
    with simulate_raw(profile):
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        for pair in profile.facts.pci_pairs:
            expected = {"single": 10, "multiple": 20, "hostbridge": 30, "node": 40, "system": 50}
            for a, b in ((pair.a, pair.b), (pair.b, pair.a)):
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
                assert level == expected[pair.level]
        assert nvml.nvmlDeviceGetTopologyCommonAncestor(handles[3], handles[3]) == 0
        nvml.nvmlShutdown()


def test_unknown_pair_level_is_not_supported(nvml: ModuleType) -> None:
    facts = NodeFacts(
        gpus=(bare_gpu(0), bare_gpu(1), bare_gpu(2)), pci_pairs=(PciPair(0, 1, "node"),)
    )
    with simulate_raw(facts):
        nvml.nvmlInit()
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        assert nvml.nvmlDeviceGetTopologyCommonAncestor(h[1], h[0]) == 40
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[2])
        nvml.nvmlShutdown()


def indices(nvml: ModuleType, handles: list[object]) -> list[int]:
    return [nvml.nvmlDeviceGetIndex(h) for h in handles]


def test_nearest_gpus_two_call_protocol(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    with simulate_raw("k80-pcie-tree"):
        nvml.nvmlInit()
        gpu4 = nvml.nvmlDeviceGetHandleByIndex(4)
        count = ctypes.c_uint(0)
        assert lib.nvmlDeviceGetTopologyNearestGpus(gpu4, 20, ctypes.byref(count), None) == 0
        assert count.value == 3
        assert indices(nvml, nvml.nvmlDeviceGetTopologyNearestGpus(gpu4, 10)) == [5]
        assert indices(nvml, nvml.nvmlDeviceGetTopologyNearestGpus(gpu4, 20)) == [5, 6, 7]
        assert indices(nvml, nvml.nvmlDeviceGetTopologyNearestGpus(gpu4, 30)) == [2, 3, 5, 6, 7]
        assert indices(nvml, nvml.nvmlDeviceGetTopologyNearestGpus(gpu4, 50)) == [
            0,
            1,
            2,
            3,
            5,
            6,
            7,
        ]
        two = (pynvml.c_nvmlDevice_t * 2)()
        count = ctypes.c_uint(2)
        rc = lib.nvmlDeviceGetTopologyNearestGpus(gpu4, 20, ctypes.byref(count), two)
        assert (rc, count.value) == (pynvml.NVML_ERROR_INSUFFICIENT_SIZE, 3)
        count = ctypes.c_uint(2)
        rc = lib.nvmlDeviceGetTopologyNearestGpus(gpu4, 20, ctypes.byref(count), None)
        assert rc == pynvml.NVML_ERROR_INVALID_ARGUMENT
        count = ctypes.c_uint(0)
        rc = lib.nvmlDeviceGetTopologyNearestGpus(gpu4, 25, ctypes.byref(count), None)
        assert rc == pynvml.NVML_ERROR_INVALID_ARGUMENT
        nvml.nvmlShutdown()


def test_topology_gpu_set_by_cpu(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    with simulate_raw("dgx-h100"):
        nvml.nvmlInit()
        count = ctypes.c_uint(0)
        assert lib.nvmlSystemGetTopologyGpuSet(100, ctypes.byref(count), None) == 0
        assert count.value == 4
        assert indices(nvml, nvml.nvmlSystemGetTopologyGpuSet(100)) == [0, 1, 2, 3]
        assert indices(nvml, nvml.nvmlSystemGetTopologyGpuSet(50)) == [4, 5, 6, 7]
        assert nvml.nvmlSystemGetTopologyGpuSet(5000) == []
        assert lib.nvmlSystemGetTopologyGpuSet(0, None, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        nvml.nvmlShutdown()


def test_p2p_status(nvml: ModuleType) -> None:
    read, nvlink, atomics = 0, pynvml.NVML_P2P_CAPS_INDEX_NVLINK, pynvml.NVML_P2P_CAPS_INDEX_ATOMICS
    with simulate_raw("dgx1-v100"):
        nvml.nvmlInit()
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        assert nvml.nvmlDeviceGetP2PStatus(h[0], h[1], nvlink) == pynvml.NVML_P2P_STATUS_OK
        assert nvml.nvmlDeviceGetP2PStatus(h[0], h[4], atomics) == pynvml.NVML_P2P_STATUS_OK
        assert (
            nvml.nvmlDeviceGetP2PStatus(h[0], h[5], nvlink) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        )
        assert (
            nvml.nvmlDeviceGetP2PStatus(h[0], h[5], read)
            == pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
        )
        assert nvml.nvmlDeviceGetP2PStatus(h[0], h[1], read) == pynvml.NVML_P2P_STATUS_OK
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetP2PStatus(h[0], h[0], read)
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetP2PStatus(h[0], h[1], 5)
        nvml.nvmlShutdown()
    with simulate_raw("dgx-a100"):
        nvml.nvmlInit()
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        # NVSwitch: every pair reaches every other through a shared switch.
        assert nvml.nvmlDeviceGetP2PStatus(h[0], h[7], nvlink) == pynvml.NVML_P2P_STATUS_OK
        nvml.nvmlShutdown()
    with simulate_raw("rtx4090x8"):
        nvml.nvmlInit()
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        assert (
            nvml.nvmlDeviceGetP2PStatus(h[0], h[1], read)
            == pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
        )
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- NVLink


def link_count(nvml: ModuleType, handle: object) -> int | None:
    value = nvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    if value.nvmlReturn != pynvml.NVML_SUCCESS:
        assert value.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
        return None
    assert value.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    return int(value.value.uiVal)


def test_nvlink_to_switches(nvml: ModuleType) -> None:
    profile = load_profile("dgx-h100")
    with simulate_raw(profile):
        nvml.nvmlInit()
        for gpu in profile.facts.gpus:
            handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
            assert link_count(nvml, handle) == 18
            assert nvml.nvmlDeviceGetNvLinkVersion(handle, 0) == 6
            for link in gpu.nvlinks:
                assert nvml.nvmlDeviceGetNvLinkState(handle, link.index) == 1
                remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link.index)
                assert remote.busId == link.remote_bus_id
                kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link.index)
                assert kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
            with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
                nvml.nvmlDeviceGetNvLinkState(handle, 18)
        nvml.nvmlShutdown()


def test_nvlink_point_to_point_counts_links_per_peer(nvml: ModuleType) -> None:
    # The DGX-1V hybrid cube mesh, as nvidia-smi topo -m shows it (0 = no NVLink).
    published = [
        [0, 1, 1, 2, 2, 0, 0, 0],
        [1, 0, 2, 1, 0, 2, 0, 0],
        [1, 2, 0, 2, 0, 0, 1, 0],
        [2, 1, 2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 1, 1, 2],
        [0, 2, 0, 0, 1, 0, 2, 1],
        [0, 0, 1, 0, 1, 2, 0, 2],
        [0, 0, 0, 1, 2, 1, 2, 0],
    ]
    with simulate_raw("dgx1-v100"):
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        buses = [nvml.nvmlDeviceGetPciInfo_v3(h).busId for h in handles]
        for i, handle in enumerate(handles):
            count = link_count(nvml, handle)
            assert count == 6
            peers = [0] * 8
            for link in range(count):
                assert nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == 0  # GPU
                peers[buses.index(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)] += 1
            assert peers == published[i], f"GPU{i}"
        nvml.nvmlShutdown()


def test_no_nvlink_gpu(nvml: ModuleType) -> None:
    with simulate_raw("pcie-l4x4"):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert link_count(nvml, handle) is None
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetNvLinkState(handle, 0)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetNvLinkVersion(handle, 0)
        nvml.nvmlShutdown()


def test_inactive_and_unlisted_links(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    links = (
        NvLink(index=0, active=True, remote_bus_id="00000000:11:00.0", remote_type="gpu"),
        NvLink(index=2, active=False),
    )
    facts = NodeFacts(gpus=(bare_gpu(0, nvlinks=links, nvlink_version=4), bare_gpu(1)))
    with simulate_raw(facts):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert link_count(nvml, handle) == 3
        assert nvml.nvmlDeviceGetNvLinkState(handle, 2) == 0
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetNvLinkState(handle, 1)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, 2)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, 2)
        # The peer is a GPU of this machine, so its device id comes along.
        assert nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, 0).busId == "00000000:11:00.0"
        assert lib.nvmlDeviceGetNvLinkState(handle, 0, None) == 2
        values = (pynvml.c_nvmlFieldValue_t * 2)()
        values[0].fieldId = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
        values[1].fieldId = 1  # a field the simulator does not model
        assert lib.nvmlDeviceGetFieldValues(handle, 2, values) == 0
        assert (values[0].nvmlReturn, values[1].nvmlReturn) == (0, 3)
        assert lib.nvmlDeviceGetFieldValues(handle, 0, values) == 2
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- fabric


def test_fabric_v2_and_v3_struct_versions(nvml: ModuleType) -> None:
    fabric = FabricInfo(
        cluster_uuid="9c6f5af3-53bf-49b5-a436-b66766c413c3",
        clique_id=4026,
        state="completed",
        status=0,
        health_mask=0x5,
    )
    with simulate_raw(NodeFacts(gpus=(bare_gpu(0, fabric=fabric),))):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        v2 = pynvml.c_nvmlGpuFabricInfo_v2_t()
        assert v2.version == 0x02000024
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(v2))
        assert bytes(v2.clusterUuid).hex() == "9c6f5af353bf49b5a436b66766c413c3"
        assert (v2.cliqueId, v2.state, v2.status, v2.healthMask) == (4026, 3, 0, 5)
        v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
        v3.healthSummary = 0xAA
        assert v3.version == 0x03000028
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(v3))
        assert (v3.cliqueId, v3.state, v3.healthMask, v3.healthSummary) == (4026, 3, 5, 0)
        v1 = pynvml.c_nvmlGpuFabricInfo_t()
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(v1))
        assert (v1.cliqueId, v1.state) == (4026, 3)
        unknown = pynvml.c_nvmlGpuFabricInfo_v2_t()
        unknown.version = 0x07000024
        with nvml_fails(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH):
            nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(unknown))
        nvml.nvmlShutdown()


def test_hopper_profiles_report_a_completed_fabric_with_zero_cluster(nvml: ModuleType) -> None:
    with simulate_raw("dgx-h100"):
        nvml.nvmlInit()
        info = pynvml.c_nvmlGpuFabricInfoV_t()
        nvml.nvmlDeviceGetGpuFabricInfoV(nvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))
        assert (info.state, info.status, bytes(info.clusterUuid)) == (3, 0, bytes(16))
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- MIG


def test_mig_disabled_and_unsupported(nvml: ModuleType) -> None:
    with simulate_raw("mixed-a100-h100"):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetMigMode(handle) == [0, 0]
        assert nvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
        nvml.nvmlShutdown()
    with simulate_raw("t4-single"):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetMigMode(handle)
        assert nvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0)
        assert nvml.nvmlDeviceIsMigDeviceHandle(handle).value == 0
        nvml.nvmlShutdown()


def test_mig_devices_of_the_mig_profile(nvml: ModuleType) -> None:
    profile = load_profile(MIG_PROFILE)
    with simulate_raw(profile):
        nvml.nvmlInit()
        gpu0 = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetMigMode(gpu0) == [1, 1]
        assert nvml.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 7
        for expected in profile.facts.gpus[0].mig_devices:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, expected.index)
            assert nvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
            assert ctypes.addressof(parent.contents) == ctypes.addressof(gpu0.contents)
            assert nvml.nvmlDeviceGetName(mig) == expected.name
            assert nvml.nvmlDeviceGetUUID(mig) == expected.uuid
            assert nvml.nvmlDeviceGetMemoryInfo(mig).total == expected.memory_total_bytes
            assert nvml.nvmlDeviceGetGpuInstanceId(mig) == expected.gpu_instance_id
            assert nvml.nvmlDeviceGetComputeInstanceId(mig) == expected.compute_instance_id
            attributes = nvml.nvmlDeviceGetAttributes_v2(mig)
            assert attributes.multiprocessorCount == expected.multiprocessors
            assert attributes.gpuInstanceSliceCount == expected.gi_slice_count
            assert attributes.computeInstanceSliceCount == expected.ci_slice_count
            assert attributes.memorySizeMB == expected.gi_memory_mib
            assert attributes.sharedCopyEngineCount == expected.copy_engines
            assert attributes.sharedDecoderCount == expected.decoders
            by_uuid = nvml.nvmlDeviceGetHandleByUUID(expected.uuid)
            assert ctypes.addressof(by_uuid.contents) == ctypes.addressof(mig.contents)
            # Physical-GPU queries do not apply to a MIG handle.
            with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
                nvml.nvmlDeviceGetPciInfo_v3(mig)
        for empty in (4, 5, 6):
            with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
                nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, empty)
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 7)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetGpuInstanceId(gpu0)
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu0)
        gpu7 = nvml.nvmlDeviceGetHandleByIndex(7)
        assert [
            nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu7, i))
            for i in range(7)
        ] == ["NVIDIA A100-SXM4-40GB MIG 1g.5gb"] * 7
        nvml.nvmlShutdown()


def test_gpu_instance_profiles(nvml: ModuleType) -> None:
    with simulate_raw(MIG_PROFILE):
        nvml.nvmlInit()
        gpu0 = nvml.nvmlDeviceGetHandleByIndex(0)
        one_slice = nvml.nvmlDeviceGetGpuInstanceProfileInfo(
            gpu0, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE
        )
        assert one_slice.version == pynvml.nvmlGpuInstanceProfileInfo_v2
        assert (one_slice.id, one_slice.sliceCount, one_slice.memorySizeMB) == (19, 1, 4864)
        assert (one_slice.instanceCount, one_slice.multiprocessorCount) == (7, 14)
        assert one_slice.name == "MIG 1g.5gb"
        three = nvml.nvmlDeviceGetGpuInstanceProfileInfo(
            gpu0, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 1
        )
        assert (three.id, three.sliceCount, three.memorySizeMB, three.instanceCount) == (
            9,
            3,
            19968,
            2,
        )
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):  # 7g.40gb is not in use here
            nvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu0, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE)
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetGpuInstanceProfileInfo(gpu0, 0x12)
        bad_version = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        bad_version.version = 0x09000098
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
        assert fn(gpu0, 0, ctypes.byref(bad_version)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        nvml.nvmlShutdown()


def test_gpu_and_compute_instances(nvml: ModuleType) -> None:
    # One 3g GPU instance split into three 1-slice compute instances, plus a 2g instance.
    devices = (
        a100_mig(0, "3g.20gb", gi=1, ci=0, ci_slices=1),
        a100_mig(1, "3g.20gb", gi=1, ci=1, ci_slices=1),
        a100_mig(2, "3g.20gb", gi=1, ci=2, ci_slices=1),
        a100_mig(3, "2g.10gb", gi=5),
    )
    gpu = bare_gpu(0, mig_mode_current=True, mig_mode_pending=True, mig_devices=devices)
    with simulate_raw(NodeFacts(gpus=(gpu,))):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        gi = nvml.nvmlDeviceGetGpuInstanceById(handle, 1)
        info = nvml.nvmlGpuInstanceGetInfo(gi)
        assert (info.id, info.profileId, info.placement.size) == (1, 9, 3)
        assert ctypes.addressof(info.device.contents) == ctypes.addressof(handle.contents)
        ci = nvml.nvmlGpuInstanceGetComputeInstanceById(gi, 2)
        ci_info = nvml.nvmlComputeInstanceGetInfo(ci)
        assert (ci_info.id, ci_info.profileId, ci_info.placement.start) == (2, 0, 2)
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlGpuInstanceGetComputeInstanceById(gi, 3)
        with nvml_fails(pynvml.NVML_ERROR_NOT_FOUND):
            nvml.nvmlDeviceGetGpuInstanceById(handle, 2)
        ci_profile = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0
        )
        assert (ci_profile.sliceCount, ci_profile.instanceCount) == (1, 3)
        assert ci_profile.multiprocessorCount == 14
        assert ci_profile.name == "MIG 1c.3g.20gb"
        gi_profile = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, 2)
        assert (gi_profile.id, gi_profile.name, gi_profile.multiprocessorCount) == (
            9,
            "MIG 3g.20gb",
            42,
        )
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0
            )
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 1)
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- reconfiguration


def test_one_library_serves_machine_after_machine(nvml: ModuleType) -> None:
    with simulate_raw("dgx-h100"):
        nvml.nvmlInit()
        stale = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetCount() == 8
        nvml.nvmlShutdown()
    with simulate_raw("pcie-l4x4"):
        nvml.nvmlInit()
        assert nvml.nvmlDeviceGetCount() == 4
        assert nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)) == "NVIDIA L4"
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceGetName(stale)
        nvml.nvmlShutdown()


def test_profile_object_with_replaced_facts(nvml: ModuleType) -> None:
    base = load_profile("t4-single")
    renamed = dataclasses.replace(base.facts.gpus[0], name="Tesla T4 (renamed)")
    profile = SimulationProfile(facts=dataclasses.replace(base.facts, gpus=(renamed,)))
    with simulate_raw(profile):
        nvml.nvmlInit()
        assert nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)) == "Tesla T4 (renamed)"
        nvml.nvmlShutdown()
