"""The ``fabric`` check: a GPU whose NVLink fabric is not ready (``FabricNotReady``) or reports
degraded health (``FabricDegraded``), from the fabric info the reader reads each cycle
(``nvmlDeviceGetGpuFabricInfoV``: the facts' ``fabric``).

On HGX/DGX Hopper and Blackwell nodes and GB200 NVL trays a GPU must register with the
NVLink fabric (the fabric manager does it) before CUDA can use it: until then every CUDA
job fails (error 802, "system not yet initialized") while the driver, ``nvidia-smi`` and
the device plugin look healthy. Per GPU (by UUID):

- fabric supported, registration ``completed`` with a status other than SUCCESS: the
  registration failed. ``FabricNotReady`` at once.
- fabric supported, state ``not-started`` or ``in-progress``: ``FabricNotReady`` once it
  has lasted the grace period (``--health-grace-period``, from the first cycle that saw
  it), so a fabric manager still starting after a boot is not reported.
- registration completed with SUCCESS, and its health mask says the bandwidth is
  degraded or a route is unhealthy (nvml.h's ``NVML_GPU_FABRIC_HEALTH_MASK_*`` fields
  ``DEGRADED_BW`` and ``ROUTE_UNHEALTHY`` read ``TRUE``): ``FabricDegraded`` at once. The
  mask's other fields (a route or access-timeout recovery in progress, the partition,
  the global fabric manager's connection, the configuration) are not judged.

A GPU without a fabric is not this check's concern and holds nothing back: its fabric
info is absent (NVML answered NOT_SUPPORTED, as on GPUs before Hopper, or the driver has
no fabric call) or its state is ``not-supported`` (a PCIe or single H200, as on the real
one captured). So a node without a fabric passes. What is held outlives a reload.
"""

from __future__ import annotations

from typing import ClassVar

from gfd.base.frozen import frozen_dataclass
from gfd.config.values import FABRIC_CHECK
from gfd.facts import FabricInfo, Gpu
from gfd.facts.pci import sysfs_bus_id
from gfd.health.check import (
    FAILING,
    OK,
    PENDING,
    UNKNOWN,
    Check,
    CheckResult,
    CheckSetup,
    Observation,
    Problem,
    gpu_name,
)

REASON_NOT_READY = "FabricNotReady"
REASON_DEGRADED = "FabricDegraded"


@frozen_dataclass
class HealthField:
    """One field of nvml.h's fabric health mask: ``(mask >> shift) & width``, and the value
    that means trouble (``NVML_GPU_FABRIC_HEALTH_MASK_<NAME>_TRUE``)."""

    name: str
    shift: int
    width: int
    bad: int
    #: How a message says it.
    words: str

    def says(self, mask: int) -> bool:
        return (mask >> self.shift) & self.width == self.bad


#: The fields judged, from nvml.h (``NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*``, ``_WIDTH_*``,
#: ``_*_TRUE``); tests/health/test_checks_fabric.py reads them from the header.
DEGRADED_BANDWIDTH = HealthField("DEGRADED_BW", 0, 0x3, 1, "bandwidth degraded")
ROUTE_UNHEALTHY = HealthField("ROUTE_UNHEALTHY", 4, 0x3, 1, "a route unhealthy")
JUDGED_HEALTH_FIELDS = (DEGRADED_BANDWIDTH, ROUTE_UNHEALTHY)
#: The fabric states of a registration not (yet) done.
REGISTERING = ("not-started", "in-progress")


def has_fabric(fabric: FabricInfo | None) -> bool:
    """Whether NVML reports a fabric this GPU must register with."""
    return fabric is not None and fabric.state != "not-supported"


class FabricCheck:
    """Reports GPUs whose fabric registration failed, is late, or whose fabric is degraded."""

    name: ClassVar[str] = FABRIC_CHECK
    reasons: ClassVar[tuple[str, ...]] = (REASON_NOT_READY, REASON_DEGRADED)
    needs_node: ClassVar[bool] = False

    def __init__(self, setup: CheckSetup, previous: Check | None = None) -> None:
        self._grace_period = setup.grace_period
        self._clock = setup.clock
        #: Per GPU UUID: when (check's clock) it was first seen registering.
        self._registering_since: dict[str, float] = {}
        if isinstance(previous, FabricCheck):
            self._registering_since = dict(previous._registering_since)

    def observe(self, seen: Observation) -> CheckResult:
        if seen.facts is None:
            return CheckResult(FABRIC_CHECK, UNKNOWN)
        now = self._clock()
        failing: list[Problem] = []
        pending: list[Problem] = []
        registering: dict[str, float] = {}
        for gpu in seen.facts.gpus:
            fabric = gpu.fabric
            if fabric is None or fabric.state == "not-supported":
                continue
            if fabric.state in REGISTERING:
                since = registering[gpu.uuid] = self._registering_since.get(gpu.uuid, now)
                problem = _not_registered(_where(gpu), fabric.state)
                (failing if now - since >= self._grace_period else pending).append(problem)
            elif fabric.status != 0 or fabric.health_mask:
                completed = _registration_problem(_where(gpu), fabric)
                if completed is not None:
                    failing.append(completed)
        # A GPU no longer registering (or gone) starts a new grace period next time.
        self._registering_since = registering
        if failing:
            return CheckResult(FABRIC_CHECK, FAILING, tuple(failing))
        if pending:
            return CheckResult(FABRIC_CHECK, PENDING, tuple(pending))
        return CheckResult(FABRIC_CHECK, OK)


def _where(gpu: Gpu) -> str:
    return gpu_name(gpu.index, sysfs_bus_id(gpu.bus_id))


def _not_registered(where: str, state: str) -> Problem:
    # No duration in the words: a message that changed every cycle would be written every cycle.
    return Problem(
        FABRIC_CHECK,
        REASON_NOT_READY,
        f"{where}: NVLink fabric registration {state} past the grace period: CUDA jobs "
        "fail until it completes (is the fabric manager running?)",
    )


def _registration_problem(where: str, fabric: FabricInfo) -> Problem | None:
    """What is wrong with a completed registration, if anything."""
    if fabric.status != 0:
        return Problem(
            FABRIC_CHECK,
            REASON_NOT_READY,
            f"{where}: NVLink fabric registration failed (NVML status {fabric.status}): "
            "CUDA jobs fail on this GPU",
        )
    mask = fabric.health_mask
    if mask is None:
        return None
    bad = [field.words for field in JUDGED_HEALTH_FIELDS if field.says(mask)]
    if not bad:
        return None
    return Problem(
        FABRIC_CHECK,
        REASON_DEGRADED,
        f"{where}: NVLink fabric health: {' and '.join(bad)} (health mask {mask:#x})",
    )
