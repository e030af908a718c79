"""Fault injection for the NVML simulator: the ``faults:`` section of a profile.

This module owns the fault model (frozen dataclasses), its YAML form and its
validation. The three kinds, all counted from the moment the library is
(re)configured and kept across ``nvmlInit``/``nvmlShutdown``:

- ``errors``: a named NVML call returns an NVML error code, optionally only for
  one GPU index and only the first ``times`` matching calls.
- ``gpu_lost``: after ``after_calls`` NVML calls on a GPU, every later call on
  it returns ``NVML_ERROR_GPU_IS_LOST``.
- ``driver_not_loaded_inits``: the first N ``nvmlInit*`` calls return
  ``NVML_ERROR_DRIVER_NOT_LOADED``, later ones succeed.

Validation errors are :class:`gfd.facts.FactsError` naming the file and the
field path (``faults.errors[0].call``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gfd.facts import FactsError

#: Every NVML symbol the simulator library exports; a fault names one of these.
EXPORTED_CALLS: tuple[str, ...] = (
    "nvmlComputeInstanceGetInfo",
    "nvmlComputeInstanceGetInfo_v2",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetName",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetTopologyNearestGpus",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlErrorString",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
    "nvmlGpuInstanceGetInfo",
    "nvmlInit",
    "nvmlInitWithFlags",
    "nvmlInit_v2",
    "nvmlShutdown",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetTopologyGpuSet",
)

#: ``nvmlErrorString`` cannot fail, so it cannot carry an injected error.
_UNFAULTABLE = frozenset({"nvmlErrorString"})

#: ``nvmlReturn_t`` error codes by name, as in nvml.h.
NVML_ERROR_CODES: dict[str, int] = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_ALREADY_INITIALIZED": 5,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_INSUFFICIENT_POWER": 8,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_IRQ_ISSUE": 11,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_CORRUPTED_INFOROM": 14,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_OPERATING_SYSTEM": 17,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_IN_USE": 19,
    "NVML_ERROR_MEMORY": 20,
    "NVML_ERROR_NO_DATA": 21,
    "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED": 22,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": 23,
    "NVML_ERROR_FREQ_NOT_SUPPORTED": 24,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
    "NVML_ERROR_DEPRECATED": 26,
    "NVML_ERROR_NOT_READY": 27,
    "NVML_ERROR_GPU_NOT_FOUND": 28,
    "NVML_ERROR_INVALID_STATE": 29,
    "NVML_ERROR_UNKNOWN": 999,
}


@dataclass(frozen=True)
class CallError:
    """``call`` returns NVML error ``code`` (for GPU ``gpu`` only, the first ``times`` calls)."""

    call: str
    code: int
    #: None: every matching call, whatever GPU it names (system calls included).
    gpu: int | None = None
    #: None: every matching call; N: only the first N.
    times: int | None = None


@dataclass(frozen=True)
class GpuLost:
    """GPU ``gpu`` answers ``after_calls`` calls, then falls off the bus for good."""

    gpu: int
    after_calls: int


@dataclass(frozen=True)
class Faults:
    """Everything that goes wrong on a simulated machine. The default: nothing."""

    errors: tuple[CallError, ...] = ()
    gpu_lost: tuple[GpuLost, ...] = ()
    driver_not_loaded_inits: int = 0


NO_FAULTS = Faults()


def parse_faults(data: Any, source: str, gpu_count: int) -> Faults:
    """Build :class:`Faults` from the plain ``faults:`` value of a profile (None: no faults)."""
    if data is None:
        return NO_FAULTS
    if not isinstance(data, Mapping):
        raise FactsError(source, "faults", f"expected a mapping, got {_kind(data)}")
    known = ("errors", "gpu_lost", "driver_not_loaded_inits")
    for key in data:
        if key not in known:
            raise FactsError(
                source, f"faults.{key}", f"unknown field (expected one of: {', '.join(known)})"
            )
    errors = tuple(
        _call_error(item, source, f"faults.errors[{i}]", gpu_count)
        for i, item in enumerate(_list(data.get("errors"), source, "faults.errors"))
    )
    lost = tuple(
        _gpu_lost(item, source, f"faults.gpu_lost[{i}]", gpu_count)
        for i, item in enumerate(_list(data.get("gpu_lost"), source, "faults.gpu_lost"))
    )
    seen: set[int] = set()
    for i, entry in enumerate(lost):
        if entry.gpu in seen:
            raise FactsError(
                source, f"faults.gpu_lost[{i}].gpu", f"GPU {entry.gpu} is listed twice"
            )
        seen.add(entry.gpu)
    inits = _count(data.get("driver_not_loaded_inits", 0), source, "faults.driver_not_loaded_inits")
    return Faults(errors=errors, gpu_lost=lost, driver_not_loaded_inits=inits)


def faults_to_dict(faults: Faults) -> dict[str, Any]:
    """The YAML form of ``faults`` (inverse of :func:`parse_faults`)."""
    names = {code: name for name, code in NVML_ERROR_CODES.items()}
    errors: list[dict[str, Any]] = []
    for error in faults.errors:
        entry: dict[str, Any] = {"call": error.call, "error": names.get(error.code, error.code)}
        if error.gpu is not None:
            entry["gpu"] = error.gpu
        if error.times is not None:
            entry["times"] = error.times
        errors.append(entry)
    return {
        "errors": errors,
        "gpu_lost": [{"gpu": f.gpu, "after_calls": f.after_calls} for f in faults.gpu_lost],
        "driver_not_loaded_inits": faults.driver_not_loaded_inits,
    }


def check_faults(faults: Faults, source: str, gpu_count: int) -> None:
    """Validate faults built in code (not parsed) against a machine with ``gpu_count`` GPUs."""
    parse_faults(faults_to_dict(faults), source, gpu_count)


def _call_error(item: Any, source: str, path: str, gpu_count: int) -> CallError:
    fields = _mapping(item, source, path, ("call", "error", "gpu", "times"))
    call = fields.get("call")
    if not isinstance(call, str):
        raise FactsError(source, f"{path}.call", "required: the name of an NVML function")
    if call not in EXPORTED_CALLS or call in _UNFAULTABLE:
        suggestions = difflib.get_close_matches(call, EXPORTED_CALLS, n=3)
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise FactsError(
            source,
            f"{path}.call",
            f"{call!r} is not an NVML function the simulator serves "
            f"(use the exact symbol, e.g. nvmlDeviceGetCount_v2){hint}",
        )
    if "error" not in fields:
        raise FactsError(source, f"{path}.error", "required: an NVML error name or code")
    code = _error_code(fields["error"], source, f"{path}.error")
    gpu = None
    if fields.get("gpu") is not None:
        gpu = _gpu_index(fields["gpu"], source, f"{path}.gpu", gpu_count)
    times = None
    if fields.get("times") is not None:
        times = _count(fields["times"], source, f"{path}.times")
    return CallError(call=call, code=code, gpu=gpu, times=times)


def _gpu_lost(item: Any, source: str, path: str, gpu_count: int) -> GpuLost:
    fields = _mapping(item, source, path, ("gpu", "after_calls"))
    if "gpu" not in fields:
        raise FactsError(source, f"{path}.gpu", "required: the index of the GPU that is lost")
    if "after_calls" not in fields:
        raise FactsError(source, f"{path}.after_calls", "required: calls answered before the loss")
    return GpuLost(
        gpu=_gpu_index(fields["gpu"], source, f"{path}.gpu", gpu_count),
        after_calls=_count(fields["after_calls"], source, f"{path}.after_calls"),
    )


def _error_code(value: Any, source: str, path: str) -> int:
    if isinstance(value, str):
        name = value if value.startswith("NVML_ERROR_") else f"NVML_ERROR_{value}"
        if name.upper() in NVML_ERROR_CODES:
            return NVML_ERROR_CODES[name.upper()]
        raise FactsError(
            source,
            path,
            f"{value!r} is not an NVML error name (e.g. NVML_ERROR_UNKNOWN, GPU_IS_LOST)",
        )
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0 or value > 0x7FFFFFFF:
            raise FactsError(source, path, f"{value} is not an NVML error code (1..2147483647)")
        return value
    raise FactsError(source, path, f"expected an NVML error name or code, got {_kind(value)}")


def _gpu_index(value: Any, source: str, path: str, gpu_count: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FactsError(source, path, f"expected a GPU index, got {_kind(value)}")
    if not 0 <= value < gpu_count:
        raise FactsError(source, path, f"GPU {value} does not exist (the machine has {gpu_count})")
    return value


def _count(value: Any, source: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FactsError(source, path, f"expected a count, got {_kind(value)}")
    if value < 0:
        raise FactsError(source, path, f"must not be negative, got {value}")
    return value


def _list(value: Any, source: str, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise FactsError(source, path, f"expected a list, got {_kind(value)}")
    return value


def _mapping(value: Any, source: str, path: str, known: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FactsError(source, path, f"expected a mapping, got {_kind(value)}")
    for key in value:
        if key not in known:
            raise FactsError(
                source, f"{path}.{key}", f"unknown field (expected one of: {', '.join(known)})"
            )
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__
