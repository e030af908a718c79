"""The ``gpu_vanished`` fault: NVML stops enumerating a GPU that is still on the PCI bus.

As after Xid 79 or a failed RmInitAdapter, the driver no longer attaches it: once it has
answered ``after_calls`` calls, the count drops by one, later GPUs move down an index,
lookups by bus id or UUID return ``NVML_ERROR_NOT_FOUND``, and its old handles return
``NVML_ERROR_GPU_IS_LOST``. Its sysfs PCI directory stays. A GPU is listed once, and
vanishes or is lost (``gpu_lost``), not both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, gpu_after_calls, once_per_gpu
from gfd.sim.faults.primitives import ChangeGpuState, Primitive


@frozen_dataclass
class GpuVanished:
    """GPU ``gpu`` answers ``after_calls`` calls, then NVML stops enumerating it for good.

    It stays on the PCI bus (its sysfs directory remains), as after Xid 79 or a failed
    RmInitAdapter: the driver no longer attaches it.
    """

    gpu: int
    after_calls: int


class VanishedGpus(EntryKind[GpuVanished]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> GpuVanished:
        _, gpu, after_calls = gpu_after_calls(item, machine, path, "vanishes")
        return GpuVanished(gpu=gpu, after_calls=after_calls)

    def check_entries(
        self, parsed: tuple[GpuVanished, ...], path: str, machine: FaultMachine
    ) -> None:
        once_per_gpu(machine, path, [entry.gpu for entry in parsed])

    def entry_to_yaml(self, entry: GpuVanished) -> dict[str, Any]:
        return {"gpu": entry.gpu, "after_calls": entry.after_calls}

    def lower_entry(self, entry: GpuVanished) -> Iterator[Primitive]:
        yield ChangeGpuState(gpu=entry.gpu, after_calls=entry.after_calls, state="vanished")


GPU_VANISHED = VanishedGpus()
