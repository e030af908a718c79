"""The MIG devices of a MIG-enabled GPU, and the GPU instance profiles they are made from.

This module owns the MIG reads. Each MIG slot's handle, name and UUID are asked every
read, so a MIG device created, destroyed or re-created (a new UUID) is seen at once; the
rest of a MIG device's facts are kept per (slot, UUID) for the session, and the slot
count and GPU instance profiles once per GPU. The profiles come from
``nvmlDeviceGetGpuInstanceProfileInfoV`` (v2 struct), or the v1 call where a driver's
library does not export it (branch 470).
"""

from __future__ import annotations

from typing import Any

import pynvml

from gfd.base.errors import NvmlError
from gfd.facts import GI_PROFILE_VARIANTS, MigDevice
from gfd.nvml.cache import UNREAD, GpuStatic
from gfd.nvml.calls import NvmlCaller, text, within_limit

#: The GPU instance profile call of each struct version pynvml can ask for.
_PROFILE_INFO_CALLS = {
    2: "nvmlDeviceGetGpuInstanceProfileInfoV",
    1: "nvmlDeviceGetGpuInstanceProfileInfo",
}


def mig_devices_if_enabled(
    nv: NvmlCaller, index: int, handle: Any, static: GpuStatic, mig: Any
) -> tuple[MigDevice, ...]:
    """The MIG devices of GPU ``index`` when its current MIG mode (``mig``) is on, else none."""
    if mig is not None and mig[0]:
        return _read_mig_devices(nv, index, handle, static)
    static.migs.clear()
    return ()


def _read_mig_devices(
    nv: NvmlCaller, gpu: int, handle: Any, static: GpuStatic
) -> tuple[MigDevice, ...]:
    """The MIG devices of a MIG-enabled GPU, by MIG index; empty slots are skipped."""
    if static.mig_slots is UNREAD:
        slots = nv.required(
            "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle
        )
        static.mig_slots = within_limit(
            "nvmlDeviceGetMaxMigDeviceCount",
            gpu,
            int(slots),
            nv.limits.mig_devices,
            "MIG devices",
        )
    devices: list[MigDevice] = []
    for index in range(static.mig_slots):
        mig = nv.absent_on(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            (pynvml.NVML_ERROR_NOT_FOUND,),
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
            handle,
            index,
        )
        if mig is None:
            continue
        if static.profiles is UNREAD:
            static.profiles = gpu_instance_profiles(nv, handle)
        name = text(nv.required("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, mig))
        uuid = text(nv.required("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, mig))
        known = static.migs.get((index, uuid))
        if known is None or known.name != name:
            known = _read_mig_device(nv, handle, index, mig, name, uuid, static.profiles)
        devices.append(known)
    # Only what exists now is kept: MIG devices that come and go do not pile up.
    static.migs = {(device.index, device.uuid): device for device in devices}
    return tuple(devices)


def gpu_instance_profiles(nv: NvmlCaller, handle: Any) -> dict[int, tuple[int, Any]]:
    """GPU instance profile id → (``NVML_GPU_INSTANCE_PROFILE_*`` index, profile info).

    Through ``nvmlDeviceGetGpuInstanceProfileInfoV`` (v2 struct), or the v1 call where the
    driver's library does not export it (branch 470): both carry the id and memory size.
    """
    version = 2
    profiles: dict[int, tuple[int, Any]] = {}
    for profile_index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        while True:
            try:
                # pynvml builds the versioned struct and passes it by reference itself.
                info = nv.absent_on(
                    _PROFILE_INFO_CALLS[version],
                    (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT),
                    pynvml.nvmlDeviceGetGpuInstanceProfileInfo,
                    handle,
                    profile_index,
                    version,
                )
                break
            except NvmlError as exc:
                if exc.code != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND or version == 1:
                    raise
                nv.absences.setdefault(_PROFILE_INFO_CALLS[version], exc.name)
                version = 1
        if info is not None:
            profiles.setdefault(int(info.id), (profile_index, info))
    return profiles


def _read_mig_device(
    nv: NvmlCaller,
    parent: Any,
    index: int,
    mig: Any,
    name: str,
    uuid: str,
    profiles: dict[int, tuple[int, Any]],
) -> MigDevice:
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
        media_extensions=GI_PROFILE_VARIANTS.get(profile_index) == "+me",
        gi_profile_index=profile_index,
    )
