"""The NVML reader: the only code in gfd that imports ``pynvml``.

One pass over NVML (and the few sysfs files NVML does not cover) builds a
:class:`gfd.facts.NodeFacts`. NOT_SUPPORTED means "absent" (the field is None),
never an error. Every other NVML failure becomes a :class:`gfd.errors.NvmlError`
carrying NVML's error name. NVML is always shut down, also on error.

Where the NVML library comes from is a parameter: ``library_path=None`` lets
pynvml load the driver's ``libnvidia-ml.so.1``; a path (the simulator) is loaded
into pynvml's module state instead. pynvml keeps that state per process, so the
loading is serialised by a lock here.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from gfd.errors import NvmlError, NvmlGpuLost, NvmlNotReady
from gfd.facts import (
    FABRIC_STATES,
    NVLINK_REMOTE_TYPES,
    PCI_LEVELS,
    FabricInfo,
    Gpu,
    MigDevice,
    NodeFacts,
    NvLink,
    PciPair,
    cpulist_from_ids,
)
from gfd.vgpu import read_vgpu

DEFAULT_SYSFS_ROOT = Path("/sys")
DEFAULT_MACHINE_TYPE_FILE = Path("/sys/class/dmi/id/product_name")

#: Words of 64 CPUs asked of nvmlDeviceGetCpuAffinity: 4096 CPUs covers any machine shipped.
CPU_AFFINITY_WORDS = 64
#: NVML_FI_DEV_NVLINK_LINK_COUNT.
FIELD_NVLINK_LINK_COUNT = 91
#: Upper bound on links probed one by one when the link-count field is not supported.
MAX_PROBED_LINKS = 36
#: ``NVML_GPU_INSTANCE_PROFILE_*`` indices of the profiles with media extensions (``+me``).
MEDIA_EXTENSION_PROFILES = frozenset(
    {pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1}
)
#: nvml.h's ``nvmlGpuFabricInfo_v3``; pynvml's default fabric struct is still v2.
FABRIC_INFO_V3 = 0x03000028

_NOT_READY_CODES = {
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
}
_ERROR_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}
_LEVEL_NAMES = {value: name for name, value in PCI_LEVELS.items()}
_REMOTE_TYPE_NAMES = {value: name for name, value in NVLINK_REMOTE_TYPES.items()}
_FABRIC_STATE_NAMES = {value: name for name, value in FABRIC_STATES.items()}

_library_lock = threading.Lock()
_loaded_library: str | None = None

T = TypeVar("T")


def error_name(code: int) -> str:
    """NVML's name for a return code (``NVML_ERROR_GPU_IS_LOST``)."""
    return _ERROR_NAMES.get(code, f"NVML_ERROR_{code}")


def _as_gfd_error(call: str, exc: pynvml.NVMLError) -> NvmlError:
    code = int(exc.value)
    name = error_name(code)
    if code in _NOT_READY_CODES:
        return NvmlNotReady(call, code, name)
    if code == pynvml.NVML_ERROR_GPU_IS_LOST:
        return NvmlGpuLost(call, code, name)
    return NvmlError(call, code, name)


def _select_library(library_path: str | Path | None) -> None:
    """Point pynvml at ``library_path`` (or back at the driver's library)."""
    global _loaded_library
    wanted = str(library_path) if library_path is not None else None
    if wanted == _loaded_library and (wanted is None or pynvml.nvmlLib is not None):
        return
    # pynvml caches symbols by name; a different library must not inherit them.
    pynvml._nvmlGetFunctionPointer_cache.clear()
    if wanted is None:
        pynvml.nvmlLib = None
    else:
        try:
            pynvml.nvmlLib = ctypes.CDLL(wanted)
        except OSError as exc:
            raise NvmlNotReady(
                "load",
                pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                "NVML_ERROR_LIBRARY_NOT_FOUND",
                str(exc),
            ) from exc
    _loaded_library = wanted


class _Session:
    """Calls into an initialised NVML, turning errors into gfd's and counting calls."""

    def __init__(self) -> None:
        self.calls = 0

    def required(self, call: str, fn: Callable[..., T], *args: Any) -> T:
        self.calls += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise _as_gfd_error(call, exc) from exc

    def optional(self, call: str, fn: Callable[..., T], *args: Any) -> T | None:
        """NOT_SUPPORTED (and NOT_FOUND for per-link calls) reads as absent."""
        return self.absent_on(call, (pynvml.NVML_ERROR_NOT_SUPPORTED,), fn, *args)

    def absent_on(
        self, call: str, codes: tuple[int, ...], fn: Callable[..., T], *args: Any
    ) -> T | None:
        """Like :meth:`required`, but the NVML errors in ``codes`` read as absent."""
        self.calls += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if exc.value in codes:
                return None
            raise _as_gfd_error(call, exc) from exc


def read_facts(
    *,
    library_path: str | Path | None = None,
    sysfs_root: Path = DEFAULT_SYSFS_ROOT,
    machine_type_file: Path = DEFAULT_MACHINE_TYPE_FILE,
) -> NodeFacts:
    """Read every fact gfd uses from NVML and sysfs in one pass."""
    with _library_lock:
        _select_library(library_path)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise _as_gfd_error("nvmlInit", exc) from exc
        try:
            return _read_all(_Session(), sysfs_root, machine_type_file)
        finally:
            # A failed shutdown cannot be acted on; the read result (or error) stands.
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def _read_all(nv: _Session, sysfs_root: Path, machine_type_file: Path) -> NodeFacts:
    driver = nv.optional("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
    cuda = nv.optional("nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion)
    count = nv.required("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
    handles = [
        nv.required("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, i)
        for i in range(count)
    ]
    gpus = tuple(_read_gpu(nv, i, h, sysfs_root) for i, h in enumerate(handles))
    pairs: list[PciPair] = []
    for a in range(count):
        for b in range(a + 1, count):
            level = nv.optional(
                "nvmlDeviceGetTopologyCommonAncestor",
                pynvml.nvmlDeviceGetTopologyCommonAncestor,
                handles[a],
                handles[b],
            )
            if level is None:
                continue
            if level not in _LEVEL_NAMES:
                raise NvmlError(
                    "nvmlDeviceGetTopologyCommonAncestor",
                    pynvml.NVML_ERROR_UNKNOWN,
                    "NVML_ERROR_UNKNOWN",
                    f"GPUs {a} and {b}: level {level} is not a known nvmlGpuTopologyLevel_t",
                )
            pairs.append(PciPair(a=a, b=b, level=_LEVEL_NAMES[level]))  # type: ignore[arg-type]
    return NodeFacts(
        driver_version=_text(driver) if driver is not None else None,
        cuda_driver_version=int(cuda) if cuda is not None else None,
        machine_type=_read_machine_type(machine_type_file),
        gpus=gpus,
        pci_pairs=tuple(pairs),
        vgpu=read_vgpu(sysfs_root),
    )


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _read_gpu(nv: _Session, index: int, handle: Any, sysfs_root: Path) -> Gpu:
    name = _text(nv.required("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
    uuid = _text(nv.required("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
    pci = nv.required("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo_v3, handle)
    bus_id = _text(pci.busId).upper()
    memory = nv.optional("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
    compute = nv.optional(
        "nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle
    )
    architecture = nv.optional(
        "nvmlDeviceGetArchitecture", pynvml.nvmlDeviceGetArchitecture, handle
    )
    brand = nv.optional("nvmlDeviceGetBrand", pynvml.nvmlDeviceGetBrand, handle)
    gpu_numa = nv.optional("nvmlDeviceGetNumaNodeId", pynvml.nvmlDeviceGetNumaNodeId, handle)
    affinity = nv.optional(
        "nvmlDeviceGetCpuAffinity", pynvml.nvmlDeviceGetCpuAffinity, handle, CPU_AFFINITY_WORDS
    )
    mig = nv.optional("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
    links = _read_nvlinks(nv, handle)
    nvlink_version = None
    if links:
        nvlink_version = nv.optional(
            "nvmlDeviceGetNvLinkVersion", pynvml.nvmlDeviceGetNvLinkVersion, handle, 0
        )
    sysfs_dir = sysfs_root / "bus" / "pci" / "devices" / sysfs_bus_id(bus_id)
    return Gpu(
        index=index,
        name=name,
        uuid=uuid,
        bus_id=bus_id,
        # 0 is no real device id: NVML leaves it zero when it cannot tell.
        pci_device_id=int(pci.pciDeviceId) or None,
        pci_class=_read_sysfs_int(sysfs_dir / "class", base=16),
        memory_total_bytes=int(memory.total) if memory is not None else None,
        compute_major=int(compute[0]) if compute is not None else None,
        compute_minor=int(compute[1]) if compute is not None else None,
        architecture=int(architecture) if architecture is not None else None,
        brand=int(brand) if brand is not None else None,
        numa_node=_read_numa_node(sysfs_dir / "numa_node"),
        gpu_numa_id=int(gpu_numa) if gpu_numa is not None else None,
        cpu_affinity=_affinity_to_cpulist(affinity) if affinity is not None else None,
        mig_mode_current=bool(mig[0]) if mig is not None else None,
        mig_mode_pending=bool(mig[1]) if mig is not None else None,
        mig_devices=_read_mig_devices(nv, handle) if mig is not None and mig[0] else (),
        nvlink_version=int(nvlink_version) if nvlink_version is not None else None,
        nvlinks=links,
        fabric=_read_fabric(nv, handle),
    )


def _read_nvlinks(nv: _Session, handle: Any) -> tuple[NvLink, ...]:
    count = _nvlink_count(nv, handle)
    links: list[NvLink] = []
    for link in range(count):
        state = nv.optional(
            "nvmlDeviceGetNvLinkState", pynvml.nvmlDeviceGetNvLinkState, handle, link
        )
        if state is None:
            continue
        active = bool(state)
        remote_bus = remote_type = None
        if active:
            remote = nv.optional(
                "nvmlDeviceGetNvLinkRemotePciInfo",
                pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                handle,
                link,
            )
            kind = nv.optional(
                "nvmlDeviceGetNvLinkRemoteDeviceType",
                pynvml.nvmlDeviceGetNvLinkRemoteDeviceType,
                handle,
                link,
            )
            remote_bus = _text(remote.busId).upper() if remote is not None else None
            remote_type = _REMOTE_TYPE_NAMES.get(int(kind), "unknown") if kind is not None else None
        links.append(
            NvLink(index=link, active=active, remote_bus_id=remote_bus, remote_type=remote_type)  # type: ignore[arg-type]
        )
    return tuple(links)


def _nvlink_count(nv: _Session, handle: Any) -> int:
    """Links of a GPU: the link-count field, else probing until NVML says the index is past the end."""
    values = nv.optional(
        "nvmlDeviceGetFieldValues",
        pynvml.nvmlDeviceGetFieldValues,
        handle,
        [FIELD_NVLINK_LINK_COUNT],
    )
    if values is not None and values[0].nvmlReturn == pynvml.NVML_SUCCESS:
        return int(values[0].value.uiVal)
    count = 0
    for link in range(MAX_PROBED_LINKS):
        nv.calls += 1
        try:
            pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as exc:
            if exc.value in (pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_SUPPORTED):
                break
            raise _as_gfd_error("nvmlDeviceGetNvLinkState", exc) from exc
        count = link + 1
    return count


def _read_mig_devices(nv: _Session, handle: Any) -> tuple[MigDevice, ...]:
    """The MIG devices of a MIG-enabled GPU, by MIG index; empty slots are skipped."""
    slots = nv.required(
        "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle
    )
    profiles: dict[int, tuple[int, Any]] | None = None
    devices: list[MigDevice] = []
    for index in range(int(slots)):
        mig = nv.absent_on(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            (pynvml.NVML_ERROR_NOT_FOUND,),
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
            handle,
            index,
        )
        if mig is None:
            continue
        if profiles is None:
            profiles = _gpu_instance_profiles(nv, handle)
        devices.append(_read_mig_device(nv, handle, index, mig, profiles))
    return tuple(devices)


def _gpu_instance_profiles(nv: _Session, handle: Any) -> dict[int, tuple[int, Any]]:
    """GPU instance profile id → (``NVML_GPU_INSTANCE_PROFILE_*`` index, profile info)."""
    profiles: dict[int, tuple[int, Any]] = {}
    for profile_index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        # pynvml builds the versioned struct and passes it by reference itself.
        info = nv.absent_on(
            "nvmlDeviceGetGpuInstanceProfileInfoV",
            (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT),
            pynvml.nvmlDeviceGetGpuInstanceProfileInfoV,
            handle,
            profile_index,
        )
        if info is not None:
            profiles.setdefault(int(info.id), (profile_index, info))
    return profiles


def _read_mig_device(
    nv: _Session, parent: Any, index: int, mig: Any, profiles: dict[int, tuple[int, Any]]
) -> MigDevice:
    name = _text(nv.required("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, mig))
    uuid = _text(nv.required("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, mig))
    memory = nv.required("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, mig)
    gi_id = int(nv.required("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig))
    ci_id = int(
        nv.required("nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig)
    )
    attributes = nv.required("nvmlDeviceGetAttributes", pynvml.nvmlDeviceGetAttributes_v2, mig)
    instance = nv.required(
        "nvmlDeviceGetGpuInstanceById", pynvml.nvmlDeviceGetGpuInstanceById, parent, gi_id
    )
    instance_info = nv.required("nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, instance)
    profile_id = int(instance_info.profileId)
    if profile_id not in profiles:
        raise NvmlError(
            "nvmlDeviceGetGpuInstanceProfileInfoV",
            pynvml.NVML_ERROR_NOT_FOUND,
            "NVML_ERROR_NOT_FOUND",
            f"MIG device {index} ({uuid}) uses GPU instance profile {profile_id}, "
            "which no profile index of its GPU reports",
        )
    profile_index, profile = profiles[profile_id]
    return MigDevice(
        index=index,
        uuid=uuid,
        name=name,
        memory_total_bytes=int(memory.total),
        gpu_instance_id=gi_id,
        compute_instance_id=ci_id,
        gi_profile_id=profile_id,
        gi_slice_count=int(attributes.gpuInstanceSliceCount),
        gi_memory_mib=int(profile.memorySizeMB),
        ci_slice_count=int(attributes.computeInstanceSliceCount),
        multiprocessors=int(attributes.multiprocessorCount),
        copy_engines=int(attributes.sharedCopyEngineCount),
        decoders=int(attributes.sharedDecoderCount),
        encoders=int(attributes.sharedEncoderCount),
        jpeg_decoders=int(attributes.sharedJpegCount),
        ofa_engines=int(attributes.sharedOfaCount),
        media_extensions=profile_index in MEDIA_EXTENSION_PROFILES,
    )


def _read_fabric(nv: _Session, handle: Any) -> FabricInfo | None:
    """Fabric info through the v3 struct (current drivers), else v2 (older drivers refuse v3)."""
    v3: Any = pynvml.c_nvmlGpuFabricInfo_v3_t()
    v3.version = FABRIC_INFO_V3
    try:
        try:
            # pynvml hands the argument straight to C: it must be a pointer.
            done = nv.optional(
                "nvmlDeviceGetGpuFabricInfoV",
                pynvml.nvmlDeviceGetGpuFabricInfoV,
                handle,
                ctypes.byref(v3),
            )
            info: Any = v3
        except NvmlError as exc:
            if exc.code != pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                raise
            info = pynvml.c_nvmlGpuFabricInfoV_t()
            done = nv.optional(
                "nvmlDeviceGetGpuFabricInfoV",
                pynvml.nvmlDeviceGetGpuFabricInfoV,
                handle,
                ctypes.byref(info),
            )
    except NvmlError as exc:
        # Drivers older than the fabric API do not export the symbol at all.
        if exc.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            return None
        raise
    if done is None:
        return None
    raw = bytes(info.clusterUuid)
    hexed = raw.hex()
    uuid = f"{hexed[0:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}"
    return FabricInfo(
        cluster_uuid=uuid,
        clique_id=int(info.cliqueId),
        state=_FABRIC_STATE_NAMES.get(int(info.state), "not-supported"),  # type: ignore[arg-type]
        status=int(info.status),
        health_mask=int(info.healthMask),
    )


def _affinity_to_cpulist(words: Any) -> str:
    # Only the set bits: testing all 64 x CPU_AFFINITY_WORDS bits of every GPU took
    # about half of a steady-state cycle's CPU time.
    cpus: list[int] = []
    for word_index, word in enumerate(words):
        value = int(word)
        while value:
            lowest = value & -value
            cpus.append(word_index * 64 + lowest.bit_length() - 1)
            value ^= lowest
    return cpulist_from_ids(cpus)


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """``00000000:1B:00.0`` (NVML) → ``0000:1b:00.0`` (sysfs)."""
    domain, rest = nvml_bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _read_sysfs_int(path: Path, base: int) -> int | None:
    try:
        return int(path.read_text().strip(), base)
    except (OSError, ValueError):
        return None


def _read_numa_node(path: Path) -> int | None:
    node = _read_sysfs_int(path, base=10)
    return None if node is None or node < 0 else node


def _read_machine_type(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
