"""A GPU's memory health as NVML reports it: ECC mode, remapped rows or retired pages, and
the volatile uncorrected ECC count, read every cycle.

This module owns :func:`read_memory_health`, composed in the per-device read
(:mod:`gfd.nvml.device`). Every call is *optional*: NOT_SUPPORTED, FUNCTION_NOT_FOUND or
INVALID_ARGUMENT leaves that part of :class:`gfd.facts.MemoryHealth` None, never fails the
read (a GPU without ECC, a GeForce board, a driver without the function); any other error
fails it as every read does (a lost GPU answers ``NVML_ERROR_GPU_IS_LOST``).

What is asked once per NVML session (:class:`~gfd.nvml.cache.GpuStatic`), and why:

- the ECC mode: it changes only with a GPU reset or reboot (a change waits as the
  *pending* mode until then), and it is the one slow call (153 µs median on an H200 with
  driver 580.159.04, ``tests/records/real-gpu/``; the others take 1–3 µs);
- which of remapped rows and retired pages the GPU supports: that is its architecture's.

What is asked every read, because it changes while gfd runs: the remapped rows, the
retired pages (only on a GPU without row remapping: Ampere replaced page retirement with
it, and Hopper answers NOT_SUPPORTED for pages), and the uncorrected ECC count (only with
ECC on: NVML counts nothing without it).
"""

from __future__ import annotations

from typing import Any

import pynvml

from gfd.facts import MemoryHealth, RemappedRows, RetiredPages
from gfd.nvml.cache import UNREAD, GpuStatic
from gfd.nvml.calls import NvmlCaller


def read_memory_health(nv: NvmlCaller, handle: Any, static: GpuStatic) -> MemoryHealth | None:
    """GPU ``handle``'s memory health; None when NVML answered none of it."""
    if static.ecc_enabled is UNREAD:
        mode = nv.optional("nvmlDeviceGetEccMode", pynvml.nvmlDeviceGetEccMode, handle)
        static.ecc_enabled = bool(mode[0]) if mode is not None else None
    ecc_enabled: bool | None = static.ecc_enabled
    volatile = None
    if ecc_enabled:
        volatile = nv.optional(
            "nvmlDeviceGetTotalEccErrors",
            pynvml.nvmlDeviceGetTotalEccErrors,
            handle,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
    rows = _remapped_rows(nv, handle, static)
    pages = _retired_pages(nv, handle, static) if rows is None else None
    if ecc_enabled is None and rows is None and pages is None and volatile is None:
        return None
    return MemoryHealth(
        ecc_enabled=ecc_enabled,
        remapped_rows=rows,
        retired_pages=pages,
        volatile_uncorrected_ecc=int(volatile) if volatile is not None else None,
    )


def _remapped_rows(nv: NvmlCaller, handle: Any, static: GpuStatic) -> RemappedRows | None:
    if static.remapped_rows_supported is False:
        return None
    answer = nv.optional("nvmlDeviceGetRemappedRows", pynvml.nvmlDeviceGetRemappedRows, handle)
    static.remapped_rows_supported = answer is not None
    if answer is None:
        return None
    correctable, uncorrectable, pending, failure = answer
    return RemappedRows(
        correctable=int(correctable),
        uncorrectable=int(uncorrectable),
        pending=bool(pending),
        failure=bool(failure),
    )


def _retired_pages(nv: NvmlCaller, handle: Any, static: GpuStatic) -> RetiredPages | None:
    if static.retired_pages_supported is False:
        return None
    # The pending status first: where it is not supported, neither are the page lists.
    pending = nv.optional(
        "nvmlDeviceGetRetiredPagesPendingStatus",
        pynvml.nvmlDeviceGetRetiredPagesPendingStatus,
        handle,
    )
    single = double = None
    if pending is not None:
        single = nv.optional(
            "nvmlDeviceGetRetiredPages",
            pynvml.nvmlDeviceGetRetiredPages,
            handle,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        )
    if single is not None:
        double = nv.optional(
            "nvmlDeviceGetRetiredPages",
            pynvml.nvmlDeviceGetRetiredPages,
            handle,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        )
    static.retired_pages_supported = double is not None
    if pending is None or single is None or double is None:
        return None
    return RetiredPages(single_bit=len(single), double_bit=len(double), pending=bool(pending))
