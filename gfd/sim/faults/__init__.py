"""Fault injection for the NVML simulator: the ``faults:`` section of a profile.

This package owns the fault model. Each kind of fault is one module here (its dataclass,
how its YAML is read, checked and written back, and what machine-file primitives it
lowers to) and one field of :class:`Faults`, the registry; ``docs/simulator.md``
(*Faults*) lists the kinds. The C library knows only the generic primitives of
:mod:`gfd.sim.faults.primitives` (a call fails or takes a while, inits fail; after N calls
on a GPU it changes state, loses links, a value of it is set or rises, events happen on
it), so a new kind of those shapes is one module and one line here, and no C.

Every fault counts from the moment the library is (re)configured, and stays across
``nvmlInit``/``nvmlShutdown``. GPU indices are those of the profile (the machine as
loaded), also for faults that take effect after an earlier GPU vanished. Validation
errors are :class:`gfd.facts.FactsError` naming the file and the field path
(``faults.errors[0].call``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.facts import Gpu
from gfd.sim.calls import EXPORTED_CALLS, NVML_ERROR_CODES
from gfd.sim.faults.delays import DELAYS, CallDelay
from gfd.sim.faults.driver_not_loaded_inits import DRIVER_NOT_LOADED_INITS
from gfd.sim.faults.ecc_rising import ECC_RISING, EccRising
from gfd.sim.faults.errors import ERRORS, CallError
from gfd.sim.faults.fabric import FABRIC, FabricChange
from gfd.sim.faults.gpu_lost import GPU_LOST, GpuLost
from gfd.sim.faults.gpu_vanished import GPU_VANISHED, GpuVanished
from gfd.sim.faults.kind import KIND_METADATA, FaultKind, registered
from gfd.sim.faults.nvlink_down import NVLINK_DOWN, NvLinkDown
from gfd.sim.faults.parsing import MAX_AFTER_CALLS, FaultMachine, kind_of
from gfd.sim.faults.pcie_link_down import PCIE_LINK_DOWN, PcieLinkDown
from gfd.sim.faults.pcie_replays import PCIE_REPLAYS, PcieReplays
from gfd.sim.faults.primitives import MAX_DELAY_SECONDS, Primitive, check_primitives
from gfd.sim.faults.remapped_rows import REMAPPED_ROWS, RowRemapping
from gfd.sim.faults.xid import XID, CriticalXid
from gfd.sim.faults.xid_storm import XID_STORM, XidStorm

__all__ = [
    "EXPORTED_CALLS",
    "MAX_AFTER_CALLS",
    "MAX_DELAY_SECONDS",
    "NO_FAULTS",
    "NVML_ERROR_CODES",
    "CallDelay",
    "CallError",
    "CriticalXid",
    "EccRising",
    "FabricChange",
    "Faults",
    "GpuLost",
    "GpuVanished",
    "NvLinkDown",
    "PcieLinkDown",
    "PcieReplays",
    "RowRemapping",
    "XidStorm",
    "check_faults",
    "fault_records",
    "faults_to_dict",
    "parse_faults",
]


@frozen_dataclass
class Faults:
    """Everything that goes wrong on a simulated machine. The default: nothing.

    The registry of fault kinds: one field per kind, named as its key in the ``faults:``
    section, in the order the machine file lists them; the field's kind parses, writes
    back and lowers its value.
    """

    errors: tuple[CallError, ...] = registered(ERRORS)
    gpu_lost: tuple[GpuLost, ...] = registered(GPU_LOST)
    driver_not_loaded_inits: int = registered(DRIVER_NOT_LOADED_INITS)
    gpu_vanished: tuple[GpuVanished, ...] = registered(GPU_VANISHED)
    nvlink_down: tuple[NvLinkDown, ...] = registered(NVLINK_DOWN)
    delays: tuple[CallDelay, ...] = registered(DELAYS)
    xid: tuple[CriticalXid, ...] = registered(XID)
    remapped_rows: tuple[RowRemapping, ...] = registered(REMAPPED_ROWS)
    ecc_rising: tuple[EccRising, ...] = registered(ECC_RISING)
    pcie_link_down: tuple[PcieLinkDown, ...] = registered(PCIE_LINK_DOWN)
    pcie_replays: tuple[PcieReplays, ...] = registered(PCIE_REPLAYS)
    fabric: tuple[FabricChange, ...] = registered(FABRIC)
    xid_storm: tuple[XidStorm, ...] = registered(XID_STORM)


NO_FAULTS = Faults()

#: Each kind by its key, in the order of :class:`Faults`.
FAULT_KINDS: dict[str, FaultKind[Any]] = {
    field.name: field.metadata[KIND_METADATA] for field in dataclasses.fields(Faults)
}


def parse_faults(data: Any, source: str, gpus: Sequence[Gpu]) -> Faults:
    """Build :class:`Faults` from the plain ``faults:`` value of a profile (None: no faults).

    ``gpus`` are the profile's GPUs: a fault must name one of them, and its links.
    """
    if data is None:
        return NO_FAULTS
    machine = FaultMachine(source=source, gpus=gpus)
    if not isinstance(data, Mapping):
        machine.fail("faults", f"expected a mapping, got {kind_of(data)}")
    for key in data:
        if key not in FAULT_KINDS:
            machine.fail(
                f"faults.{key}", f"unknown field (expected one of: {', '.join(FAULT_KINDS)})"
            )
    faults = Faults(
        **{
            name: kind.parse(data[name], f"faults.{name}", machine)
            for name, kind in FAULT_KINDS.items()
            if name in data
        }
    )
    check_primitives(lower_faults(faults), machine)
    return faults


def faults_to_dict(faults: Faults) -> dict[str, Any]:
    """The YAML form of ``faults`` (inverse of :func:`parse_faults`)."""
    return {name: kind.to_yaml(getattr(faults, name)) for name, kind in FAULT_KINDS.items()}


def check_faults(faults: Faults, source: str, gpus: Sequence[Gpu]) -> None:
    """Validate faults built in code (not parsed) against a machine with ``gpus``."""
    parse_faults(faults_to_dict(faults), source, gpus)


def lower_faults(faults: Faults) -> list[tuple[str, Primitive]]:
    """Every primitive ``faults`` stand for, with the path of the entry it came from."""
    return [
        (f"faults.{name}{where}", primitive)
        for name, kind in FAULT_KINDS.items()
        for where, primitive in kind.lower(getattr(faults, name))
    ]


def fault_records(faults: Faults) -> list[str]:
    """The machine-file records of ``faults`` (which must have been checked)."""
    return [primitive.record() for _, primitive in lower_faults(faults)]
