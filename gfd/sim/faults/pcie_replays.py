"""The ``pcie_replays`` fault: the GPU's PCIe link keeps retransmitting (a marginal link,
a failing riser or retimer).

After ``after_calls`` calls on the GPU, every further call on it adds ``per_call`` to the
counter ``nvmlDeviceGetPcieReplayCounter`` reports (which stops at 2**32 - 1). The GPU must
report the counter (its facts' ``pcie.replay_counter``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, count, gpu_after_calls
from gfd.sim.faults.primitives import Primitive, RaiseValue
from gfd.sim.gpu_health import MAX_COUNT32, GpuValue


@frozen_dataclass
class PcieReplays:
    """After ``after_calls`` calls on GPU ``gpu``, each call adds ``per_call`` replays."""

    gpu: int
    after_calls: int
    per_call: int


class RisingPcieReplays(EntryKind[PcieReplays]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> PcieReplays:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "counts PCIe replays", extra=("per_call",)
        )
        if "per_call" not in fields:
            machine.fail(f"{path}.per_call", "required: replays each call on the GPU adds")
        per_call = count(fields["per_call"], machine, f"{path}.per_call")
        if not 1 <= per_call <= MAX_COUNT32:
            machine.fail(f"{path}.per_call", f"{per_call} is not 1 to {MAX_COUNT32}")
        link = machine.gpus[gpu].pcie
        if link is None or link.replay_counter is None:
            machine.fail(
                f"{path}.gpu",
                f"GPU {gpu} reports no PCIe replay counter (its pcie.replay_counter is null: "
                "NVML answers NOT_SUPPORTED)",
            )
        return PcieReplays(gpu=gpu, after_calls=after_calls, per_call=per_call)

    def entry_to_yaml(self, entry: PcieReplays) -> dict[str, Any]:
        return {"gpu": entry.gpu, "after_calls": entry.after_calls, "per_call": entry.per_call}

    def lower_entry(self, entry: PcieReplays) -> Iterator[Primitive]:
        yield RaiseValue(
            gpu=entry.gpu,
            after_calls=entry.after_calls,
            value=GpuValue.PCIE_REPLAY_COUNTER,
            per_call=entry.per_call,
        )


PCIE_REPLAYS = RisingPcieReplays()
