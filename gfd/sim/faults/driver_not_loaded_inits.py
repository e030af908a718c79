"""The ``driver_not_loaded_inits`` fault: the driver is not loaded yet.

The first N ``nvmlInit*`` calls (``nvmlInit``, ``nvmlInit_v2`` and ``nvmlInitWithFlags``
counted together) return ``NVML_ERROR_DRIVER_NOT_LOADED``; later ones succeed. Its YAML
value is the count itself, not a list.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.sim.faults.kind import FaultKind
from gfd.sim.faults.parsing import FaultMachine, count
from gfd.sim.faults.primitives import FailInits, Primitive


class DriverNotLoadedInits(FaultKind[int]):
    def empty(self) -> int:
        return 0

    def parse(self, value: Any, path: str, machine: FaultMachine) -> int:
        return count(value, machine, path)

    def to_yaml(self, value: int) -> int:
        return value

    def lower(self, value: int) -> Iterator[tuple[str, Primitive]]:
        if value:
            yield "", FailInits(count=value)


DRIVER_NOT_LOADED_INITS = DriverNotLoadedInits()
