"""A GPU's NVLink fabric (clique) membership, through whichever fabric call the driver has.

This module owns the fabric read and its fallbacks across driver branches:
``nvmlDeviceGetGpuFabricInfoV`` with the v3 struct (current drivers), the v2 struct when
the driver refuses v3, and the v1 call ``nvmlDeviceGetGpuFabricInfo`` where ``...InfoV``
is not exported (branches 525 and 535). Branch 470 has neither: the fact is absent.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from gfd.base.errors import NvmlError
from gfd.facts import FABRIC_STATES, FabricInfo
from gfd.nvml.calls import NvmlCaller

#: nvml.h's ``nvmlGpuFabricInfo_v3``; pynvml's default fabric struct is still v2.
FABRIC_INFO_V3 = 0x03000028

#: Errors of the first fabric call that read as absent; FUNCTION_NOT_FOUND and a struct
#: version mismatch have fallbacks instead.
_FABRIC_ABSENT = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)
_FABRIC_STATE_NAMES = {value: name for name, value in FABRIC_STATES.items()}


def read_fabric(nv: NvmlCaller, handle: Any) -> FabricInfo | None:
    """The fabric info of one GPU, or None where no fabric call of its driver answers."""
    info: Any = pynvml.c_nvmlGpuFabricInfo_v3_t()
    info.version = FABRIC_INFO_V3
    # pynvml hands the argument straight to C: it must be a pointer.
    call, fn = "nvmlDeviceGetGpuFabricInfoV", pynvml.nvmlDeviceGetGpuFabricInfoV
    try:
        done = nv.absent_on(call, _FABRIC_ABSENT, fn, handle, ctypes.byref(info))
    except NvmlError as exc:
        if exc.code == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
            info = pynvml.c_nvmlGpuFabricInfoV_t()
        elif exc.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            nv.absences.setdefault(call, exc.name)
            info = pynvml.c_nvmlGpuFabricInfo_t()
            call, fn = "nvmlDeviceGetGpuFabricInfo", pynvml.nvmlDeviceGetGpuFabricInfo
        else:
            raise
        done = nv.optional(call, fn, handle, ctypes.byref(info))
    if done is None:
        return None
    raw = bytes(info.clusterUuid)
    hexed = raw.hex()
    uuid = f"{hexed[0:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}"
    # The v1 struct has no health mask.
    health_mask = getattr(info, "healthMask", None)
    return FabricInfo(
        cluster_uuid=uuid,
        clique_id=int(info.cliqueId),
        state=_FABRIC_STATE_NAMES.get(int(info.state), "not-supported"),  # type: ignore[arg-type]
        status=int(info.status),
        health_mask=int(health_mask) if health_mask is not None else None,
    )
