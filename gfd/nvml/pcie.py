"""A GPU's PCIe link as NVML reports it: what it could reach (once per session), how it is
trained now and its replay counter (every read).

This module owns :func:`read_pcie`, composed in the per-device read
(:mod:`gfd.nvml.device`). Every call is *optional*: NOT_SUPPORTED, FUNCTION_NOT_FOUND or
INVALID_ARGUMENT leaves that value of :class:`gfd.facts.PcieLink` None, never fails the
read (branch 470 exports no ``nvmlDeviceGetGpuMaxPcieLinkGeneration``); any other error
fails it as every read does (a lost GPU answers ``NVML_ERROR_GPU_IS_LOST``).

What is asked once per NVML session (:class:`~gfd.nvml.cache.GpuStatic`), and why: the
maxima. ``nvmlDeviceGetMaxPcieLinkGeneration``/``Width`` report the most "possible with
this device and system" (nvml.h: a Gen2 GPU on a Gen1 bus reports 1, a x16 GPU in a x8
slot 8), which is fixed by the GPU and the slot it sits in, and
``nvmlDeviceGetGpuMaxPcieLinkGeneration`` is the GPU's own. What the link could reach is
therefore NVML's answer already; the slot's sysfs files (``max_link_speed``,
``max_link_width`` of the upstream port under ``--sysfs-root``) would be a second reading
of the same fact, and in a virtual machine, where the GPU sits on the root bus with no
upstream port (the real H200 at ``00:06.0``), there is none to read.

What is asked every read, because it changes while gfd runs: the current generation and
width (a link retrains after an error, or drops its speed at idle), the replay counter,
and, only when the current generation is below what the link could reach, the GPU's
utilisation, which tells a link that idles from one trained down (the ``pcie`` health
check's rule): a healthy link costs no utilisation call. A call the GPU answered absent
is not asked again in the session (as the memory-health read does for its calls).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pynvml

from gfd.facts import PcieLink
from gfd.nvml.cache import UNREAD, GpuStatic, PcieMaxima
from gfd.nvml.calls import NvmlCaller


def read_pcie(nv: NvmlCaller, handle: Any, static: GpuStatic) -> PcieLink | None:
    """GPU ``handle``'s PCIe link; None when NVML answered none of it."""
    if static.pcie_maxima is UNREAD:
        static.pcie_maxima = _read_maxima(nv, handle)
    maxima: PcieMaxima = static.pcie_maxima
    link = PcieLink(
        current_generation=_every_read(
            nv,
            "nvmlDeviceGetCurrPcieLinkGeneration",
            pynvml.nvmlDeviceGetCurrPcieLinkGeneration,
            handle,
            static,
        ),
        current_width=_every_read(
            nv,
            "nvmlDeviceGetCurrPcieLinkWidth",
            pynvml.nvmlDeviceGetCurrPcieLinkWidth,
            handle,
            static,
        ),
        max_generation=maxima.generation,
        max_width=maxima.width,
        gpu_max_generation=maxima.gpu_generation,
        replay_counter=_every_read(
            nv,
            "nvmlDeviceGetPcieReplayCounter",
            pynvml.nvmlDeviceGetPcieReplayCounter,
            handle,
            static,
        ),
    )
    if link == PcieLink():
        return None
    if below_reachable_generation(link):
        busy = _every_read(
            nv,
            "nvmlDeviceGetUtilizationRates",
            lambda device: pynvml.nvmlDeviceGetUtilizationRates(device).gpu,
            handle,
            static,
        )
        link = replace(link, gpu_utilization=busy)
    return link


def below_reachable_generation(link: PcieLink) -> bool:
    """Whether the link runs below the generation it could reach: then, and only then, the
    reader asks the GPU's utilisation (and the simulator can serve it)."""
    reachable = link.reachable_generation
    current = link.current_generation
    return current is not None and reachable is not None and current < reachable


def _read_maxima(nv: NvmlCaller, handle: Any) -> PcieMaxima:
    generation = nv.optional(
        "nvmlDeviceGetMaxPcieLinkGeneration", pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle
    )
    width = nv.optional(
        "nvmlDeviceGetMaxPcieLinkWidth", pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle
    )
    gpu_generation = nv.optional(
        "nvmlDeviceGetGpuMaxPcieLinkGeneration",
        pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration,
        handle,
    )
    return PcieMaxima(_unsigned(generation), _unsigned(width), _unsigned(gpu_generation))


def _every_read(
    nv: NvmlCaller, call: str, fn: Callable[[Any], Any], handle: Any, static: GpuStatic
) -> int | None:
    """A value asked every read, unless this GPU answered it absent earlier in the session
    (whether a GPU supports a call is its own: a Grace-attached GPU costs no call a cycle)."""
    if call in static.pcie_unanswered:
        return None
    value = nv.optional(call, fn, handle)
    if value is None:
        static.pcie_unanswered.add(call)
    return _unsigned(value)


def _unsigned(value: Any) -> int | None:
    return int(value) if value is not None else None
