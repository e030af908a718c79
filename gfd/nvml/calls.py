"""How one read calls NVML: errors turned into gfd's, absences recorded, counts bounded.

This module owns the rules every NVML call of a read follows (the roles of
:data:`gfd.nvml.reader.NVML_CALLS`): a *required* call's error fails the read with a
:class:`gfd.base.errors.NvmlError` carrying NVML's error name (:class:`~gfd.base.errors.NvmlNotReady`
for a driver that is not there, :class:`~gfd.base.errors.NvmlGpuLost` for a GPU that fell off
the bus); an *optional* call's NOT_SUPPORTED, FUNCTION_NOT_FOUND or INVALID_ARGUMENT makes
its fact absent and is recorded with its cause. It also owns the refusal of counts no real
node reports (:class:`NvmlBeyondLimits`), checked before anything that grows with them is
asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from gfd.base.errors import NvmlError, NvmlGpuLost, NvmlNotReady
from gfd.facts.limits import MACHINE_LIMITS, MachineLimits, limit_problem

#: NVML errors that make an optional fact absent: the driver's library does not export the
#: function, the device does not support it, or the call is not valid for this device.
ABSENT_CODES: tuple[int, ...] = (
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_INVALID_ARGUMENT,
)

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

T = TypeVar("T")


def error_name(code: int) -> str:
    """NVML's name for a return code (``NVML_ERROR_GPU_IS_LOST``)."""
    return _ERROR_NAMES.get(code, f"NVML_ERROR_{code}")


def as_gfd_error(call: str, exc: pynvml.NVMLError) -> NvmlError:
    """pynvml's error of ``call`` as gfd's, of the class the agent acts on."""
    code = int(exc.value)
    name = error_name(code)
    if code in _NOT_READY_CODES:
        return NvmlNotReady(call, code, name)
    if code == pynvml.NVML_ERROR_GPU_IS_LOST:
        return NvmlGpuLost(call, code, name)
    return NvmlError(call, code, name)


class NvmlCaller:
    """Calls into an initialised NVML for one read, turning errors into gfd's and counting calls.

    ``absences`` collects, per call, the cause that made an optional fact absent.
    """

    def __init__(self, limits: MachineLimits = MACHINE_LIMITS) -> None:
        self.calls = 0
        self.absences: dict[str, str] = {}
        self.limits = limits

    def required(self, call: str, fn: Callable[..., T], *args: Any) -> T:
        self.calls += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise as_gfd_error(call, exc) from exc

    def unsupported_absent(self, call: str, fn: Callable[..., T], *args: Any) -> T | None:
        """A call every driver exports: only NOT_SUPPORTED reads as absent."""
        return self.absent_on(call, (pynvml.NVML_ERROR_NOT_SUPPORTED,), fn, *args)

    def optional(self, call: str, fn: Callable[..., T], *args: Any) -> T | None:
        """Not exported, not supported or not valid for this device reads as absent."""
        return self.absent_on(call, ABSENT_CODES, fn, *args)

    def absent_on(
        self, call: str, codes: tuple[int, ...], fn: Callable[..., T], *args: Any
    ) -> T | None:
        """Like :meth:`required`, but the NVML errors in ``codes`` read as absent."""
        self.calls += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if exc.value in codes:
                self.absences.setdefault(call, error_name(int(exc.value)))
                return None
            raise as_gfd_error(call, exc) from exc


class NvmlBeyondLimits(NvmlError):
    """NVML reported more of something than any real node has (:mod:`gfd.facts.limits`).

    Nothing that grows with the count is asked: the read fails at once, as on any NVML
    error, and the agent keeps the last labels.
    """

    def __init__(self, call: str, gpu: int | None, problem: str) -> None:
        super().__init__(call, pynvml.NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN", problem)
        of = f" of GPU {gpu}" if gpu is not None else ""
        # NVML itself did not fail: the message says what it answered.
        self.args = (f"NVML {call}{of} reported {problem}",)


def within_limit(call: str, gpu: int | None, count: int, limit: int, what: str) -> int:
    """``count`` as NVML reported it, refused when no real node has that many."""
    if count > limit:
        raise NvmlBeyondLimits(call, gpu, limit_problem(count, limit, what))
    return count


def on_gpu(index: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, a read of GPU ``index``: a GPU lost during it is named by that index."""
    try:
        return fn(*args)
    except NvmlGpuLost as exc:
        if exc.gpu_index is None:
            exc.gpu_index = index
        raise


def text(value: str | bytes) -> str:
    """A string from pynvml, which some of its releases hand back as bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
