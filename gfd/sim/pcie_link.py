"""What a simulated GPU's PCIe calls answer: its link, from the facts' ``pcie`` block.

This module owns, per GPU, the machine file's ``value`` records of the PCIe link
(:func:`pcie_value_records`: ``nvmlDeviceGet{Curr,Max}PcieLink{Generation,Width}``,
``nvmlDeviceGetGpuMaxPcieLinkGeneration``, ``nvmlDeviceGetPcieReplayCounter`` and
``nvmlDeviceGetUtilizationRates``, served by ``sim_pcie.c``; a value not written is
NOT_SUPPORTED), and :func:`check_pcie`, which refuses a ``pcie`` block the reader could
not read back as written.

A GPU serves its facts' ``pcie`` exactly as written (``null``, and each null part, is
NOT_SUPPORTED), so a captured machine replays as captured. The bundled profiles carry the
links of their hardware; a facts file without the block models a GPU (or a driver, or a
platform) that answers none of it.
"""

from __future__ import annotations

from gfd.facts import FactsError, Gpu, PcieLink
from gfd.nvml.pcie import below_reachable_generation
from gfd.sim.gpu_health import GpuValue

_VALUES = {
    "current_generation": GpuValue.PCIE_CURRENT_GENERATION,
    "current_width": GpuValue.PCIE_CURRENT_WIDTH,
    "max_generation": GpuValue.PCIE_MAX_GENERATION,
    "max_width": GpuValue.PCIE_MAX_WIDTH,
    "gpu_max_generation": GpuValue.PCIE_GPU_MAX_GENERATION,
    "replay_counter": GpuValue.PCIE_REPLAY_COUNTER,
    "gpu_utilization": GpuValue.GPU_UTILIZATION,
}


def check_pcie(gpu: Gpu, source: str, where: str) -> None:
    """Refuse a ``pcie`` block that gfd's reader would read back otherwise; ``where`` is the
    GPU's path (``gpus[0]``)."""
    link = gpu.pcie
    if link is None:
        return
    path = f"{where}.pcie"
    if link == PcieLink():
        raise FactsError(source, path, "every part is null: write pcie: null")
    if link.gpu_utilization is None:
        return
    if gpu.mig_mode_current:
        raise FactsError(
            source,
            f"{path}.gpu_utilization",
            "NVML reports no utilisation of a MIG-enabled GPU; set it to null",
        )
    if not below_reachable_generation(link):
        raise FactsError(
            source,
            f"{path}.gpu_utilization",
            "gfd asks the utilisation only while current_generation is below what the link "
            "could reach (max_generation, and gpu_max_generation); set it to null",
        )


def pcie_value_records(gpu: Gpu) -> list[str]:
    """The PCIe ``value`` records of ``gpu``'s machine-file section (its ``pcie`` must have
    passed :func:`check_pcie`)."""
    if gpu.pcie is None:
        return []
    return [
        f"value {value} {getattr(gpu.pcie, name)}"
        for name, value in _VALUES.items()
        if getattr(gpu.pcie, name) is not None
    ]
