"""The ``remapped_rows`` fault: the GPU's row remapper reports new remappings.

After ``after_calls`` calls on the GPU, ``nvmlDeviceGetRemappedRows`` answers the fields
given, the others as before: ``correctable`` and ``uncorrectable`` (rows remapped so far
for each cause), ``pending`` (a remapping waits for a GPU reset) and ``failure`` (a
remapping failed: the GPU should be serviced). At least one is given. The GPU must report
remapped rows (its facts' ``memory_health.remapped_rows``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, count, flag, gpu_after_calls
from gfd.sim.faults.primitives import Primitive, SetValue
from gfd.sim.gpu_health import MAX_COUNT32, GpuValue

_COUNTS = {
    "correctable": GpuValue.REMAPPED_ROWS_CORRECTABLE,
    "uncorrectable": GpuValue.REMAPPED_ROWS_UNCORRECTABLE,
}
_FLAGS = {"pending": GpuValue.REMAPPED_ROWS_PENDING, "failure": GpuValue.REMAPPED_ROWS_FAILURE}


@frozen_dataclass
class RowRemapping:
    """After ``after_calls`` calls on GPU ``gpu``, its remapped rows read as given (None: as before)."""

    gpu: int
    after_calls: int
    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


def _row_count(given: dict[str, Any], name: str, machine: FaultMachine, path: str) -> int | None:
    if name not in given:
        return None
    rows = count(given[name], machine, f"{path}.{name}")
    if rows > MAX_COUNT32:
        machine.fail(f"{path}.{name}", f"{rows} does not fit 32 bits")
    return rows


def _flag(given: dict[str, Any], name: str, machine: FaultMachine, path: str) -> bool | None:
    return flag(given[name], machine, f"{path}.{name}") if name in given else None


class RowRemappings(EntryKind[RowRemapping]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> RowRemapping:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "remaps rows", extra=(*_COUNTS, *_FLAGS)
        )
        given = {name: fields[name] for name in (*_COUNTS, *_FLAGS) if fields.get(name) is not None}
        if not given:
            machine.fail(path, f"names no change (give one of: {', '.join((*_COUNTS, *_FLAGS))})")
        health = machine.gpus[gpu].memory_health
        if health is None or health.remapped_rows is None:
            machine.fail(
                f"{path}.gpu",
                f"GPU {gpu} reports no remapped rows (its memory_health.remapped_rows is "
                "null: NVML answers NOT_SUPPORTED)",
            )
        return RowRemapping(
            gpu=gpu,
            after_calls=after_calls,
            correctable=_row_count(given, "correctable", machine, path),
            uncorrectable=_row_count(given, "uncorrectable", machine, path),
            pending=_flag(given, "pending", machine, path),
            failure=_flag(given, "failure", machine, path),
        )

    def entry_to_yaml(self, entry: RowRemapping) -> dict[str, Any]:
        fields: dict[str, Any] = {"gpu": entry.gpu, "after_calls": entry.after_calls}
        for name in (*_COUNTS, *_FLAGS):
            if getattr(entry, name) is not None:
                fields[name] = getattr(entry, name)
        return fields

    def lower_entry(self, entry: RowRemapping) -> Iterator[Primitive]:
        for name, value in {**_COUNTS, **_FLAGS}.items():
            given = getattr(entry, name)
            if given is not None:
                yield SetValue(
                    gpu=entry.gpu, after_calls=entry.after_calls, value=value, to=int(given)
                )


REMAPPED_ROWS = RowRemappings()
