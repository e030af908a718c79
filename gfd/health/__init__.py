"""GPU health: the checks, their false-positive guards, the state they add up to, and the
``GPUHealthy`` node condition that reports it.

gfd judges the health of the node's GPUs each cycle from what the cycle already holds
(the facts NVML gave, the sysfs PCI tree, and, with the node sink, the Node the sink
reads anyway). The package, one concern a module:

- :mod:`~gfd.health.check`: the :class:`~gfd.health.check.Check` protocol, what a check
  is handed and what it answers, the cycle's :class:`~gfd.health.check.Verdict`;
- :mod:`~gfd.health.checks`: one module per check — ``gpu-lost``
  (:mod:`~gfd.health.checks.gpu_lost`), ``device-plugin``
  (:mod:`~gfd.health.checks.device_plugin`), ``nvlink``
  (:mod:`~gfd.health.checks.nvlink`), ``xid`` (:mod:`~gfd.health.checks.xid`), ``memory``
  (:mod:`~gfd.health.checks.memory`), ``pcie`` (:mod:`~gfd.health.checks.pcie`);
- :mod:`~gfd.health.dra_node`: whether NVIDIA's DRA driver rather than the device plugin
  hands out the node's GPUs (:class:`DraNodeWatch`), for the device-plugin check and
  ``--label-mode auto``;
- :mod:`~gfd.health.xid_catalog`: NVIDIA's Xid catalog as data, each Xid's recommended
  action, which the ``xid`` check's messages and the Xid counter carry;
- :mod:`~gfd.health.registry`: the one mapping from a check's name to its class;
- :mod:`~gfd.health.monitor`: :class:`HealthMonitor`, which runs the enabled checks and
  keeps what they remember across cycles and reloads;
- :mod:`~gfd.health.condition`: :class:`HealthState` (the condition's status, reason and
  message, and the label ``nvidia.com/gpu.health``), its parsing from the Node, and
  :class:`NodeConditionWriter`, which writes it and an Event per change;
- :mod:`~gfd.health.reporter`: :class:`HealthReporter`, which turns verdicts into that
  state, holding the last one while no check can decide.

The names below are those the rest of gfd and its tools import from ``gfd.health``; those
of one check's module (its reasons, its helpers), of :mod:`~gfd.health.dra_node` and
:data:`REASONS` are imported when first asked for, so that importing the package imports
no check, nor the DRA-node decision a run without the node sink never makes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gfd.config.values import DEVICE_PLUGIN_CHECK as DEVICE_PLUGIN
from gfd.config.values import FABRIC_CHECK as FABRIC
from gfd.config.values import GPU_LOST_CHECK as GPU_LOST
from gfd.config.values import MEMORY_CHECK as MEMORY
from gfd.config.values import NVLINK_CHECK as NVLINK
from gfd.config.values import PCIE_CHECK as PCIE
from gfd.config.values import XID_CHECK as XID
from gfd.health.check import (
    CANNOT_DECIDE,
    DEFAULT_GRACE_PERIOD,
    FAILING,
    OK,
    PENDING,
    UNKNOWN,
    Check,
    CheckResult,
    EventRules,
    PcieRules,
    Problem,
    Verdict,
)
from gfd.health.condition import (
    CONDITION_TYPE,
    EVENT_NAMESPACE,
    HEALTH_LABEL,
    REASON_HEALTHY,
    HealthState,
    NodeConditionWriter,
    Transition,
    node_condition,
    node_reader,
    state_from_condition,
)
from gfd.health.monitor import HealthMonitor
from gfd.health.registry import API_CHECKS, REGISTRY, reasons_of
from gfd.health.reporter import HealthReporter

if TYPE_CHECKING:
    from gfd.health.checks.device_plugin import REASON_ALLOCATABLE, REASON_PLUGIN_MISSING
    from gfd.health.checks.gpu_lost import REASON_GPU_LOST, PciScanner
    from gfd.health.checks.memory import (
        REASON_MEMORY_FAILURE,
        REASON_RESET_REQUIRED,
        REASON_UNCORRECTABLE_ECC,
    )
    from gfd.health.checks.nvlink import REASON_NVLINK
    from gfd.health.checks.pcie import REASON_LINK_DEGRADED, REASON_REPLAYS_RISING
    from gfd.health.checks.xid import REASON_XID
    from gfd.health.dra_node import DraNodeWatch, expected_resources

    #: Every check's condition reasons by priority (importing it imports every check).
    REASONS: tuple[str, ...]

#: The names above that live in one check's module (under ``gfd.health.checks``), imported
#: when first asked for: importing this package must not import every check, since a run
#: imports only the checks it enables (gfd.health.registry).
_FROM_A_CHECK = {
    "REASON_ALLOCATABLE": "device_plugin",
    "REASON_PLUGIN_MISSING": "device_plugin",
    "REASON_GPU_LOST": "gpu_lost",
    "PciScanner": "gpu_lost",
    "REASON_MEMORY_FAILURE": "memory",
    "REASON_RESET_REQUIRED": "memory",
    "REASON_UNCORRECTABLE_ECC": "memory",
    "REASON_NVLINK": "nvlink",
    "REASON_LINK_DEGRADED": "pcie",
    "REASON_REPLAYS_RISING": "pcie",
    "REASON_XID": "xid",
}
#: Names of the DRA-node decision, which only the device-plugin check and ``--label-mode
#: auto`` use (both with the node sink): a run that writes a file never imports it.
_FROM_DRA_NODE = frozenset({"DraNodeWatch", "expected_resources"})


def __getattr__(name: str) -> Any:
    """The names of :data:`_FROM_A_CHECK` and :data:`_FROM_DRA_NODE`, and :data:`REASONS`,
    on first use (PEP 562)."""
    if name == "REASONS":
        return reasons_of(REGISTRY)
    if name in _FROM_DRA_NODE:
        return getattr(importlib.import_module("gfd.health.dra_node"), name)
    module = _FROM_A_CHECK.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"gfd.health.checks.{module}"), name)


__all__ = [
    "API_CHECKS",
    "CANNOT_DECIDE",
    "CONDITION_TYPE",
    "DEFAULT_GRACE_PERIOD",
    "DEVICE_PLUGIN",
    "EVENT_NAMESPACE",
    "FABRIC",
    "FAILING",
    "GPU_LOST",
    "HEALTH_LABEL",
    "MEMORY",
    "NVLINK",
    "OK",
    "PCIE",
    "PENDING",
    "REASONS",
    "REASON_ALLOCATABLE",
    "REASON_GPU_LOST",
    "REASON_HEALTHY",
    "REASON_LINK_DEGRADED",
    "REASON_MEMORY_FAILURE",
    "REASON_NVLINK",
    "REASON_PLUGIN_MISSING",
    "REASON_REPLAYS_RISING",
    "REASON_RESET_REQUIRED",
    "REASON_UNCORRECTABLE_ECC",
    "REASON_XID",
    "REGISTRY",
    "UNKNOWN",
    "XID",
    "Check",
    "CheckResult",
    "DraNodeWatch",
    "EventRules",
    "HealthMonitor",
    "HealthReporter",
    "HealthState",
    "NodeConditionWriter",
    "PciScanner",
    "PcieRules",
    "Problem",
    "Transition",
    "Verdict",
    "expected_resources",
    "node_condition",
    "node_reader",
    "state_from_condition",
]
