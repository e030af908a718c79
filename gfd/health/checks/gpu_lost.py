"""The ``gpu-lost`` check: a GPU on the PCI bus that NVML does not see, or one that
answered ``NVML_ERROR_GPU_IS_LOST`` during the read (``GPULost``).

What counts as a GPU on the bus is an NVIDIA display or 3D controller (vendor ``0x10de``,
class ``0x03xxxx``, as :mod:`gfd.facts.pci` reads them; NVSwitches are bridges, ``0x0680``).
Guards: a device bound to another driver (``vfio-pci`` for a VM, ``nouveau``) is not
NVML's to see, and an SR-IOV virtual function (it has ``physfn``) is no GPU of this host.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from gfd.base.errors import NvmlGpuLost
from gfd.base.frozen import frozen_dataclass
from gfd.config.values import GPU_LOST_CHECK
from gfd.facts.pci import PCI_DEVICES, is_nvidia_display, sysfs_bus_id
from gfd.health.check import (
    FAILING,
    OK,
    UNKNOWN,
    Check,
    CheckResult,
    CheckSetup,
    Observation,
    Problem,
    gpu_name,
)

REASON_GPU_LOST = "GPULost"

#: The driver whose GPUs NVML sees; a device bound to any other is left alone.
NVIDIA_DRIVER = "nvidia"


@frozen_dataclass
class PciGpu:
    """An NVIDIA display or 3D controller on the PCI bus that NVML should see."""

    #: sysfs form: ``0000:8a:00.0``.
    address: str


class PciScanner:
    """The NVIDIA GPUs under ``<sysfs_root>/bus/pci/devices``, cheaply, every cycle.

    A device's vendor, class and SR-IOV role do not change while its address exists,
    so they are read once per address; only the directory listing and the ``driver``
    link of each candidate are read each cycle (binding can change).
    """

    def __init__(self, sysfs_root: Path) -> None:
        # Plain strings: per cycle, pathlib's joins would cost more than the scan itself.
        self._dir = os.path.join(sysfs_root, PCI_DEVICES)
        self._candidate: dict[str, bool] = {}

    def scan(self) -> tuple[PciGpu, ...] | None:
        """The GPUs NVML should see, by address; None when the PCI tree cannot be listed."""
        try:
            names = os.listdir(self._dir)
        except OSError:
            return None
        candidate = self._candidate
        if len(candidate) > 4 * len(names) + 64:
            # Hot-plug churn: forget addresses that are gone.
            candidate = self._candidate = {n: candidate[n] for n in names if n in candidate}
        gpus = []
        for name in names:
            known = candidate.get(name)
            if known is None:
                known = candidate[name] = self._is_nvidia_gpu(f"{self._dir}/{name}")
            if known:
                gpus.append(name)
        gpus.sort()
        return tuple(
            PciGpu(name.lower())
            for name in gpus
            if self._driver(f"{self._dir}/{name}") in (None, NVIDIA_DRIVER)
        )

    @staticmethod
    def _is_nvidia_gpu(device: str) -> bool:
        # An SR-IOV virtual function (vGPU on a host) is not a GPU NVML lists.
        return is_nvidia_display(Path(device)) and not os.path.lexists(f"{device}/physfn")

    @staticmethod
    def _driver(device: str) -> str | None:
        try:
            return os.path.basename(os.readlink(f"{device}/driver"))
        except OSError:
            return None


class GpuLostCheck:
    """Compares the GPUs on the PCI bus with those NVML lists, and reads a lost GPU's error."""

    name: ClassVar[str] = GPU_LOST_CHECK
    reasons: ClassVar[tuple[str, ...]] = (REASON_GPU_LOST,)
    needs_node: ClassVar[bool] = False

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        # Nothing to take over from ``previous``: the GPU names are the monitor's, and the
        # scanner's cache is rebuilt in one cycle (``sysfs_root`` may have changed).
        self._pci = PciScanner(setup.sysfs_root)

    def observe(self, seen: Observation) -> CheckResult:
        if seen.facts is None:
            error = seen.error
            if isinstance(error, NvmlGpuLost):
                index = error.gpu_index
                message = (
                    f"{gpu_name(index, seen.gpus.address_of(index))} is lost: "
                    f"NVML answers {error.name}"
                )
                problem = Problem(GPU_LOST_CHECK, REASON_GPU_LOST, message)
                return CheckResult(GPU_LOST_CHECK, FAILING, (problem,))
            return CheckResult(GPU_LOST_CHECK, UNKNOWN)
        on_bus = self._pci.scan()
        if on_bus is None:
            return CheckResult(GPU_LOST_CHECK, UNKNOWN)
        visible = {sysfs_bus_id(gpu.bus_id) for gpu in seen.facts.gpus}
        problems = tuple(
            Problem(
                GPU_LOST_CHECK,
                REASON_GPU_LOST,
                f"{gpu_name(seen.gpus.index_at(device.address), device.address)} "
                "is on the PCI bus but NVML does not see it",
            )
            for device in on_bus
            if device.address not in visible
        )
        return CheckResult(GPU_LOST_CHECK, FAILING if problems else OK, problems)
