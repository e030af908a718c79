"""The ``ecc_rising`` fault: uncorrectable ECC errors keep coming.

After ``after_calls`` calls on the GPU, every further call on it adds ``per_call`` to its
uncorrected ECC counts, volatile and aggregate alike, as ``nvmlDeviceGetTotalEccErrors``
reports them (a count stops at 2**64 - 1). The GPU must report the count (its facts'
``memory_health.volatile_uncorrected_ecc``, which needs ECC on).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, count, gpu_after_calls
from gfd.sim.faults.primitives import Primitive, RaiseValue
from gfd.sim.gpu_health import MAX_COUNT64, GpuValue


@frozen_dataclass
class EccRising:
    """After ``after_calls`` calls on GPU ``gpu``, each call adds ``per_call`` uncorrected errors."""

    gpu: int
    after_calls: int
    per_call: int


class RisingEccCounts(EntryKind[EccRising]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> EccRising:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "counts ECC errors", extra=("per_call",)
        )
        if "per_call" not in fields:
            machine.fail(f"{path}.per_call", "required: errors each call on the GPU adds")
        per_call = count(fields["per_call"], machine, f"{path}.per_call")
        if not 1 <= per_call <= MAX_COUNT64:
            machine.fail(f"{path}.per_call", f"{per_call} is not 1 to {MAX_COUNT64}")
        health = machine.gpus[gpu].memory_health
        if health is None or health.volatile_uncorrected_ecc is None:
            machine.fail(
                f"{path}.gpu",
                f"GPU {gpu} reports no ECC error counts (its "
                "memory_health.volatile_uncorrected_ecc is null: NVML answers NOT_SUPPORTED)",
            )
        return EccRising(gpu=gpu, after_calls=after_calls, per_call=per_call)

    def entry_to_yaml(self, entry: EccRising) -> dict[str, Any]:
        return {"gpu": entry.gpu, "after_calls": entry.after_calls, "per_call": entry.per_call}

    def lower_entry(self, entry: EccRising) -> Iterator[Primitive]:
        for value in (GpuValue.ECC_VOLATILE_UNCORRECTED, GpuValue.ECC_AGGREGATE_UNCORRECTED):
            yield RaiseValue(
                gpu=entry.gpu, after_calls=entry.after_calls, value=value, per_call=entry.per_call
            )


ECC_RISING = RisingEccCounts()
