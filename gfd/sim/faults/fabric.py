"""The ``fabric`` fault: a GPU's NVLink fabric registration is stuck, failed or degraded.

After ``after_calls`` calls on the GPU (0: from the start), ``nvmlDeviceGetGpuFabricInfoV``
(and the v1 call) answers the fields given, the others as the facts say: ``state``
(``not-started``, ``in-progress`` or ``completed``: a fabric manager that is late or dead
leaves it short of ``completed``), ``status`` (the registration's NVML return code: a
name such as ``NVML_ERROR_UNKNOWN``, a code, or ``SUCCESS``) and ``health_mask`` (the
``NVML_GPU_FABRIC_HEALTH_MASK_*`` bits: ``1`` is degraded bandwidth, ``0x10`` an
unhealthy route). At least one is given. Several entries on a GPU apply in their order,
so a later one can bring the fabric back (a fabric manager that came up late).

The GPU must have a fabric in its facts (``fabric`` not null, its state not
``not-supported``: a GPU without one does not gain one), and for ``health_mask`` a
driver that reports one (the facts' ``health_mask`` not null).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.facts import FABRIC_STATES
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, count, error_code, gpu_after_calls
from gfd.sim.faults.primitives import Primitive, SetValue
from gfd.sim.gpu_health import MAX_COUNT32, GpuValue

#: The states a fault may set: a GPU whose fabric is supported never reads not-supported.
SETTABLE_STATES = tuple(state for state in FABRIC_STATES if state != "not-supported")
_SUCCESS_WORDS = ("SUCCESS", "NVML_SUCCESS")
_FIELDS = ("state", "status", "health_mask")


@frozen_dataclass
class FabricChange:
    """After ``after_calls`` calls on GPU ``gpu``, its fabric info reads as given (None: as before)."""

    gpu: int
    after_calls: int
    #: A :data:`gfd.facts.FABRIC_STATES` name other than ``not-supported``.
    state: str | None = None
    #: An NVML return code (0: SUCCESS).
    status: int | None = None
    health_mask: int | None = None


def _status(value: Any, machine: FaultMachine, path: str) -> int:
    if value == 0 or (isinstance(value, str) and value.upper() in _SUCCESS_WORDS):
        return 0
    return error_code(value, machine, path)


class FabricChanges(EntryKind[FabricChange]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> FabricChange:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "changes its fabric", extra=_FIELDS
        )
        given = {name: fields[name] for name in _FIELDS if fields.get(name) is not None}
        if not given:
            machine.fail(path, f"names no change (give one of: {', '.join(_FIELDS)})")
        fabric = machine.gpus[gpu].fabric
        if fabric is None or fabric.state == "not-supported":
            machine.fail(
                f"{path}.gpu",
                f"GPU {gpu} has no fabric to change (its facts' fabric is "
                f"{'null' if fabric is None else 'not-supported'})",
            )
        state = None
        if "state" in given:
            state = given["state"]
            if state not in SETTABLE_STATES:
                machine.fail(
                    f"{path}.state",
                    f"{state!r} is not a fabric state (one of: {', '.join(SETTABLE_STATES)})",
                )
        status = _status(given["status"], machine, f"{path}.status") if "status" in given else None
        mask = None
        if "health_mask" in given:
            mask = count(given["health_mask"], machine, f"{path}.health_mask")
            if mask > MAX_COUNT32:
                machine.fail(f"{path}.health_mask", f"{mask} does not fit 32 bits")
            if fabric.health_mask is None:
                machine.fail(
                    f"{path}.health_mask",
                    f"GPU {gpu}'s driver reports no health mask (its facts' "
                    "fabric.health_mask is null, as from the v1 call of branches 525 and 535)",
                )
        return FabricChange(
            gpu=gpu, after_calls=after_calls, state=state, status=status, health_mask=mask
        )

    def entry_to_yaml(self, entry: FabricChange) -> dict[str, Any]:
        fields: dict[str, Any] = {"gpu": entry.gpu, "after_calls": entry.after_calls}
        for name in _FIELDS:
            if getattr(entry, name) is not None:
                fields[name] = getattr(entry, name)
        return fields

    def lower_entry(self, entry: FabricChange) -> Iterator[Primitive]:
        values = {
            GpuValue.FABRIC_STATE: None if entry.state is None else FABRIC_STATES[entry.state],
            GpuValue.FABRIC_STATUS: entry.status,
            GpuValue.FABRIC_HEALTH_MASK: entry.health_mask,
        }
        for value, to in values.items():
            if to is not None:
                yield SetValue(gpu=entry.gpu, after_calls=entry.after_calls, value=value, to=to)


FABRIC = FabricChanges()
