"""The registry of GPU health checks: the one table of every check, by name, in order.

:class:`~gfd.health.monitor.HealthMonitor` builds and runs the enabled checks from here,
in this order, which is also the order of the reasons' priority. Each line of
:data:`CHECKS` names a check, the module under :mod:`gfd.health.checks` that holds it and
its class there, and whether it needs the Node; the class is imported only when a
configuration enables the check (:data:`REGISTRY`), so a run pays for the checks it runs
and no others (``tests/test_startup_imports.py``). A new check is one module under
:mod:`gfd.health.checks` and one line in :data:`CHECKS`; its name joins
:data:`gfd.config.values.HEALTH_CHECKS`, which configuration parses without importing any
check. ``tests/health/test_registry.py`` holds each line to its class (name, module,
``needs_node``) and the table to the names configuration accepts.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from gfd.base.frozen import frozen_dataclass
from gfd.config.values import (
    DEVICE_PLUGIN_CHECK,
    FABRIC_CHECK,
    GPU_LOST_CHECK,
    MEMORY_CHECK,
    NVLINK_CHECK,
    PCIE_CHECK,
    XID_CHECK,
)
from gfd.health.check import CheckFactory

#: The package every check's module is in.
CHECKS_PACKAGE = "gfd.health.checks"


@frozen_dataclass
class CheckEntry:
    """One line of the registry: a check known without importing it."""

    #: The name users enable it by (its class's ``name``).
    name: str
    #: Its module under :data:`CHECKS_PACKAGE` (``gpu_lost``).
    module: str
    #: The class in that module that satisfies :class:`~gfd.health.check.CheckFactory`.
    class_name: str
    #: Its class's ``needs_node``, declared here so that a run without the node sink can
    #: leave the check out without importing it.
    needs_node: bool = False

    def load(self) -> CheckFactory:
        """The check's class, imported now (once: Python keeps the module)."""
        module = importlib.import_module(f"{CHECKS_PACKAGE}.{self.module}")
        factory: CheckFactory = getattr(module, self.class_name)
        return factory


#: Every check, in the order their problems are reported.
CHECKS: tuple[CheckEntry, ...] = (
    CheckEntry(GPU_LOST_CHECK, "gpu_lost", "GpuLostCheck"),
    CheckEntry(DEVICE_PLUGIN_CHECK, "device_plugin", "DevicePluginCheck", needs_node=True),
    CheckEntry(FABRIC_CHECK, "fabric", "FabricCheck"),
    CheckEntry(NVLINK_CHECK, "nvlink", "NvLinkCheck"),
    CheckEntry(XID_CHECK, "xid", "XidCheck"),
    CheckEntry(MEMORY_CHECK, "memory", "MemoryCheck"),
    CheckEntry(PCIE_CHECK, "pcie", "PcieCheck"),
)


class CheckRegistry(Mapping[str, CheckFactory]):
    """The checks of a table by name, in its order; looking one up imports its class.

    Iterating (the names) imports nothing: the monitor looks up only the checks it
    enables.
    """

    def __init__(self, entries: tuple[CheckEntry, ...]) -> None:
        self._entries = {entry.name: entry for entry in entries}
        if len(self._entries) != len(entries):
            raise ValueError("two checks of the registry share a name")

    def __getitem__(self, name: str) -> CheckFactory:
        return self._entries[name].load()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


REGISTRY: Mapping[str, CheckFactory] = CheckRegistry(CHECKS)
#: The checks that need the Node object: without the node sink they cannot run.
API_CHECKS = frozenset(entry.name for entry in CHECKS if entry.needs_node)


def reasons_of(registry: Mapping[str, CheckFactory]) -> tuple[str, ...]:
    """The condition reasons of ``registry``'s checks by priority: the condition's reason
    is the first one that applies. Imports every check of ``registry``."""
    return tuple(reason for factory in registry.values() for reason in factory.reasons)
