"""Fault injection for the NVML simulator: the ``faults:`` section of a profile.

This module owns the fault model (frozen dataclasses), its YAML form and its
validation. The kinds, all counted from the moment the library is
(re)configured and kept across ``nvmlInit``/``nvmlShutdown``:

- ``errors``: a named NVML call returns an NVML error code, optionally only for
  one GPU index and only the first ``times`` matching calls.
- ``gpu_lost``: after ``after_calls`` NVML calls on a GPU, every later call on
  it returns ``NVML_ERROR_GPU_IS_LOST``.
- ``gpu_vanished``: after ``after_calls`` NVML calls on a GPU, NVML no longer
  enumerates it (the count drops by one, later GPUs move down an index, lookups by
  bus id or UUID return ``NVML_ERROR_NOT_FOUND``); its old handles return
  ``NVML_ERROR_GPU_IS_LOST``. Its sysfs PCI directory stays. A GPU is lost or
  vanishes, not both.
- ``nvlink_down``: after ``after_calls`` NVML calls on a GPU, the listed links (all
  of them when ``links`` is omitted) are inactive.
- ``driver_not_loaded_inits``: the first N ``nvmlInit*`` calls return
  ``NVML_ERROR_DRIVER_NOT_LOADED``, later ones succeed.
- ``delays``: a named NVML call takes ``seconds`` before it answers (a driver slow to
  initialise, a GPU whose calls hang), optionally only for one GPU and only the first
  ``times`` matching calls. A signal does not cut the wait short, as it does not end a
  hung driver's call: what a process does then is what it would do on a real node.

GPU indices are those of the profile (the machine as loaded), also for faults that
take effect after an earlier GPU vanished.

Validation errors are :class:`gfd.facts.FactsError` naming the file and the
field path (``faults.errors[0].call``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gfd.facts import FactsError, Gpu

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

#: The machine file's AFTER_CALLS is a 32-bit unsigned number.
MAX_AFTER_CALLS = 2**32 - 1
#: The longest delay (``SIM_MAX_DELAY_MS``): an hour is a hung driver already.
MAX_DELAY_SECONDS = 3600

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
class CallDelay:
    """``call`` takes ``seconds`` before it answers (for GPU ``gpu`` only, the first ``times`` calls)."""

    call: str
    #: Rounded to milliseconds in the machine file; at least 1 ms.
    seconds: float
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
class GpuVanished:
    """GPU ``gpu`` answers ``after_calls`` calls, then NVML stops enumerating it for good.

    It stays on the PCI bus (its sysfs directory remains), as after Xid 79 or a failed
    RmInitAdapter: the driver no longer attaches it.
    """

    gpu: int
    after_calls: int


@dataclass(frozen=True)
class NvLinkDown:
    """After ``after_calls`` calls on GPU ``gpu``, its links ``links`` go inactive for good."""

    gpu: int
    after_calls: int
    #: Link indices (``nvlinks[].index``) of the GPU; None: every link it has.
    links: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Faults:
    """Everything that goes wrong on a simulated machine. The default: nothing."""

    errors: tuple[CallError, ...] = ()
    gpu_lost: tuple[GpuLost, ...] = ()
    driver_not_loaded_inits: int = 0
    gpu_vanished: tuple[GpuVanished, ...] = ()
    nvlink_down: tuple[NvLinkDown, ...] = ()
    delays: tuple[CallDelay, ...] = ()


NO_FAULTS = Faults()


def parse_faults(data: Any, source: str, gpus: Sequence[Gpu]) -> Faults:
    """Build :class:`Faults` from the plain ``faults:`` value of a profile (None: no faults).

    ``gpus`` are the profile's GPUs: a fault must name one of them, and its links.
    """
    if data is None:
        return NO_FAULTS
    if not isinstance(data, Mapping):
        raise FactsError(source, "faults", f"expected a mapping, got {_kind(data)}")
    gpu_count = len(gpus)
    known = (
        "errors",
        "gpu_lost",
        "gpu_vanished",
        "nvlink_down",
        "driver_not_loaded_inits",
        "delays",
    )
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
        GpuLost(*_gpu_after_calls(item, source, f"faults.gpu_lost[{i}]", gpu_count, "is lost"))
        for i, item in enumerate(_list(data.get("gpu_lost"), source, "faults.gpu_lost"))
    )
    _once_each(source, "faults.gpu_lost", [entry.gpu for entry in lost])
    vanished = tuple(
        GpuVanished(
            *_gpu_after_calls(item, source, f"faults.gpu_vanished[{i}]", gpu_count, "vanishes")
        )
        for i, item in enumerate(_list(data.get("gpu_vanished"), source, "faults.gpu_vanished"))
    )
    _once_each(source, "faults.gpu_vanished", [entry.gpu for entry in vanished])
    lost_gpus = {entry.gpu: i for i, entry in enumerate(lost)}
    for i, entry in enumerate(vanished):
        if entry.gpu in lost_gpus:
            raise FactsError(
                source,
                f"faults.gpu_vanished[{i}].gpu",
                f"GPU {entry.gpu} is already lost by faults.gpu_lost[{lost_gpus[entry.gpu]}]; "
                "a GPU is either lost (still counted) or vanished (no longer enumerated)",
            )
    links_down = tuple(
        _nvlink_down(item, source, f"faults.nvlink_down[{i}]", gpus)
        for i, item in enumerate(_list(data.get("nvlink_down"), source, "faults.nvlink_down"))
    )
    _once_each(source, "faults.nvlink_down", [entry.gpu for entry in links_down])
    inits = _count(data.get("driver_not_loaded_inits", 0), source, "faults.driver_not_loaded_inits")
    delays = tuple(
        _call_delay(item, source, f"faults.delays[{i}]", gpu_count)
        for i, item in enumerate(_list(data.get("delays"), source, "faults.delays"))
    )
    return Faults(
        errors=errors,
        gpu_lost=lost,
        driver_not_loaded_inits=inits,
        gpu_vanished=vanished,
        nvlink_down=links_down,
        delays=delays,
    )


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
        "gpu_vanished": [{"gpu": f.gpu, "after_calls": f.after_calls} for f in faults.gpu_vanished],
        "nvlink_down": [_nvlink_down_to_dict(f) for f in faults.nvlink_down],
        "driver_not_loaded_inits": faults.driver_not_loaded_inits,
        "delays": [_delay_to_dict(d) for d in faults.delays],
    }


def _delay_to_dict(delay: CallDelay) -> dict[str, Any]:
    entry: dict[str, Any] = {"call": delay.call, "seconds": delay.seconds}
    if delay.gpu is not None:
        entry["gpu"] = delay.gpu
    if delay.times is not None:
        entry["times"] = delay.times
    return entry


def _nvlink_down_to_dict(fault: NvLinkDown) -> dict[str, Any]:
    entry: dict[str, Any] = {"gpu": fault.gpu, "after_calls": fault.after_calls}
    if fault.links is not None:
        entry["links"] = list(fault.links)
    return entry


def check_faults(faults: Faults, source: str, gpus: Sequence[Gpu]) -> None:
    """Validate faults built in code (not parsed) against a machine with ``gpus``."""
    parse_faults(faults_to_dict(faults), source, gpus)


def _call_name(fields: Mapping[str, Any], source: str, path: str) -> str:
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
    return call


def _call_delay(item: Any, source: str, path: str, gpu_count: int) -> CallDelay:
    fields = _mapping(item, source, path, ("call", "seconds", "gpu", "times"))
    call = _call_name(fields, source, path)
    seconds = fields.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise FactsError(source, f"{path}.seconds", "required: how long the call takes, in seconds")
    if not 0.001 <= seconds <= MAX_DELAY_SECONDS:
        raise FactsError(
            source, f"{path}.seconds", f"{seconds} is not between 0.001 and {MAX_DELAY_SECONDS}"
        )
    gpu = None
    if fields.get("gpu") is not None:
        gpu = _gpu_index(fields["gpu"], source, f"{path}.gpu", gpu_count)
    times = None
    if fields.get("times") is not None:
        times = _count(fields["times"], source, f"{path}.times")
    return CallDelay(call=call, seconds=seconds, gpu=gpu, times=times)


def _call_error(item: Any, source: str, path: str, gpu_count: int) -> CallError:
    fields = _mapping(item, source, path, ("call", "error", "gpu", "times"))
    call = _call_name(fields, source, path)
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


def _gpu_after_calls(
    item: Any,
    source: str,
    path: str,
    gpu_count: int,
    what: str,
    extra: tuple[str, ...] = (),
) -> tuple[int, int]:
    """The ``gpu`` and ``after_calls`` of an entry about the GPU that ``what`` (``is lost``)."""
    fields = _mapping(item, source, path, ("gpu", "after_calls", *extra))
    if "gpu" not in fields:
        raise FactsError(source, f"{path}.gpu", f"required: the index of the GPU that {what}")
    if "after_calls" not in fields:
        raise FactsError(
            source, f"{path}.after_calls", "required: calls the GPU answers before the fault"
        )
    after_calls = _count(fields["after_calls"], source, f"{path}.after_calls")
    if after_calls > MAX_AFTER_CALLS:
        raise FactsError(
            source,
            f"{path}.after_calls",
            f"{after_calls} is more than the machine file holds ({MAX_AFTER_CALLS})",
        )
    return _gpu_index(fields["gpu"], source, f"{path}.gpu", gpu_count), after_calls


def _nvlink_down(item: Any, source: str, path: str, gpus: Sequence[Gpu]) -> NvLinkDown:
    gpu, after_calls = _gpu_after_calls(
        item, source, path, len(gpus), "loses links", extra=("links",)
    )
    present = [link.index for link in gpus[gpu].nvlinks]
    if not present:
        raise FactsError(source, f"{path}.gpu", f"GPU {gpu} has no NVLinks to take down")
    value = item.get("links")
    if value is None:
        return NvLinkDown(gpu=gpu, after_calls=after_calls)
    listed = _list(value, source, f"{path}.links")
    if not listed:
        raise FactsError(
            source, f"{path}.links", "names no link (omit links to take every link down)"
        )
    links: list[int] = []
    for j, link in enumerate(listed):
        where = f"{path}.links[{j}]"
        if isinstance(link, bool) or not isinstance(link, int):
            raise FactsError(source, where, f"expected a link index, got {_kind(link)}")
        if link not in present:
            raise FactsError(
                source,
                where,
                f"GPU {gpu} has no link {link} (its links: {_ranges(sorted(present))})",
            )
        if link in links:
            raise FactsError(source, where, f"link {link} is listed twice")
        links.append(link)
    return NvLinkDown(gpu=gpu, after_calls=after_calls, links=tuple(links))


def _once_each(source: str, path: str, gpus: list[int]) -> None:
    seen: set[int] = set()
    for i, gpu in enumerate(gpus):
        if gpu in seen:
            raise FactsError(source, f"{path}[{i}].gpu", f"GPU {gpu} is listed twice")
        seen.add(gpu)


def _ranges(values: list[int]) -> str:
    """``0-5,8`` for sorted ``[0, 1, 2, 3, 4, 5, 8]``."""
    parts: list[str] = []
    start = previous = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if value is not None:
            start = previous = value
    return ",".join(parts)


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
