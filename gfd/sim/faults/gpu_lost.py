"""The ``gpu_lost`` fault: a GPU falls off the bus.

After ``after_calls`` NVML calls on the GPU, every later call on it returns
``NVML_ERROR_GPU_IS_LOST``, and so do lookups of it by index, bus id or UUID;
``nvmlDeviceGetCount`` still counts it, as NVML does. A GPU is listed once, and is lost
or vanishes (``gpu_vanished``), not both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, gpu_after_calls, once_per_gpu
from gfd.sim.faults.primitives import ChangeGpuState, Primitive


@frozen_dataclass
class GpuLost:
    """GPU ``gpu`` answers ``after_calls`` calls, then falls off the bus for good."""

    gpu: int
    after_calls: int


class LostGpus(EntryKind[GpuLost]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> GpuLost:
        _, gpu, after_calls = gpu_after_calls(item, machine, path, "is lost")
        return GpuLost(gpu=gpu, after_calls=after_calls)

    def check_entries(self, parsed: tuple[GpuLost, ...], path: str, machine: FaultMachine) -> None:
        once_per_gpu(machine, path, [entry.gpu for entry in parsed])

    def entry_to_yaml(self, entry: GpuLost) -> dict[str, Any]:
        return {"gpu": entry.gpu, "after_calls": entry.after_calls}

    def lower_entry(self, entry: GpuLost) -> Iterator[Primitive]:
        yield ChangeGpuState(gpu=entry.gpu, after_calls=entry.after_calls, state="lost")


GPU_LOST = LostGpus()
