"""The registry of GPU health checks: the one mapping from a check's name to its class.

:class:`~gfd.health.monitor.HealthMonitor` builds and runs the enabled checks from here,
in this order, which is also the order of the reasons' priority (:data:`REASONS`). A new
check is one module under :mod:`gfd.health.checks` and one line in :data:`CHECK_CLASSES`;
its name joins :data:`gfd.config.values.HEALTH_CHECKS`, which configuration parses
without importing any check (a test holds the two to the same names).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gfd.health.check import CheckFactory
from gfd.health.checks.device_plugin import DevicePluginCheck
from gfd.health.checks.fabric import FabricCheck
from gfd.health.checks.gpu_lost import GpuLostCheck
from gfd.health.checks.memory import MemoryCheck
from gfd.health.checks.nvlink import NvLinkCheck
from gfd.health.checks.xid import XidCheck

#: Every check, in the order their problems are reported.
CHECK_CLASSES: tuple[CheckFactory, ...] = (
    GpuLostCheck,
    DevicePluginCheck,
    FabricCheck,
    NvLinkCheck,
    XidCheck,
    MemoryCheck,
)

REGISTRY: Mapping[str, CheckFactory] = MappingProxyType(
    {factory.name: factory for factory in CHECK_CLASSES}
)


def reasons_of(registry: Mapping[str, CheckFactory]) -> tuple[str, ...]:
    """The condition reasons of ``registry``'s checks by priority: the condition's reason
    is the first one that applies."""
    return tuple(reason for factory in registry.values() for reason in factory.reasons)


def node_checks(registry: Mapping[str, CheckFactory]) -> frozenset[str]:
    """The names of ``registry``'s checks that need the Node object (the node sink's read)."""
    return frozenset(name for name, factory in registry.items() if factory.needs_node)


REASONS = reasons_of(REGISTRY)
#: The checks that need the Node object: without the node sink they cannot run.
API_CHECKS = node_checks(REGISTRY)
