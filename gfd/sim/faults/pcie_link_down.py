"""The ``pcie_link_down`` fault: a GPU's PCIe link trains down (a bad reseat, a failing
retimer): narrower and/or slower than the GPU and its slot could reach.

After ``after_calls`` calls on the GPU (0: from the start), ``nvmlDeviceGetCurrPcieLinkWidth``
answers ``width`` and ``nvmlDeviceGetCurrPcieLinkGeneration`` answers ``generation``
(at least one is given; each at most what the link could reach, its facts' ``pcie``
maxima: a later entry at the reach is the link retrained, by a GPU reset or a reseat), and ``nvmlDeviceGetUtilizationRates`` answers ``gpu_utilization`` percent when
given: a lower generation is told from a link idling to save power only by the GPU being
busy, so a generation fault that a health check should count gives it. The maxima stay
as they were: NVML's maximum is what the GPU and its slot allow, not what the link trained
at. The GPU must report its link (its facts' ``pcie`` with the current and maximum value
of what the fault changes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.sim.faults.kind import EntryKind
from gfd.sim.faults.parsing import FaultMachine, count, gpu_after_calls
from gfd.sim.faults.primitives import Primitive, SetValue
from gfd.sim.gpu_health import GpuValue

_LEVELS = {
    "width": ("current_width", "reachable_width", GpuValue.PCIE_CURRENT_WIDTH),
    "generation": ("current_generation", "reachable_generation", GpuValue.PCIE_CURRENT_GENERATION),
}


@frozen_dataclass
class PcieLinkDown:
    """After ``after_calls`` calls on GPU ``gpu``, its link runs at ``width`` lanes and
    ``generation`` (None: as before), its utilisation reads ``gpu_utilization`` percent."""

    gpu: int
    after_calls: int
    width: int | None = None
    generation: int | None = None
    gpu_utilization: int | None = None


class PcieLinksDown(EntryKind[PcieLinkDown]):
    def parse_entry(self, item: Any, path: str, machine: FaultMachine) -> PcieLinkDown:
        fields, gpu, after_calls = gpu_after_calls(
            item, machine, path, "trains down", extra=(*_LEVELS, "gpu_utilization")
        )
        if fields.get("width") is None and fields.get("generation") is None:
            machine.fail(path, "names no change (give width, generation or both)")
        link = machine.gpus[gpu].pcie
        levels: dict[str, int | None] = {}
        for name, (current, reachable, _) in _LEVELS.items():
            if fields.get(name) is None:
                levels[name] = None
                continue
            level = count(fields[name], machine, f"{path}.{name}")
            could = getattr(link, reachable) if link is not None else None
            if link is None or getattr(link, current) is None or could is None:
                machine.fail(
                    f"{path}.gpu",
                    f"GPU {gpu} reports no PCIe link {name} (its pcie.{current} and the maximum "
                    "are needed: NVML answers NOT_SUPPORTED)",
                )
            if not 1 <= level <= could:
                machine.fail(
                    f"{path}.{name}",
                    f"{level} is not a {name} this link can train at: give 1 to {could} "
                    f"(what it could reach)",
                )
            levels[name] = level
        busy = None
        if fields.get("gpu_utilization") is not None:
            busy = count(fields["gpu_utilization"], machine, f"{path}.gpu_utilization")
            if busy > 100:
                machine.fail(f"{path}.gpu_utilization", f"{busy} is not a percentage (0 to 100)")
            if levels["generation"] is None:
                machine.fail(
                    f"{path}.gpu_utilization",
                    "NVML's utilisation is asked only while the generation is below reach: "
                    "give a generation too",
                )
            if machine.gpus[gpu].mig_mode_current:
                machine.fail(
                    f"{path}.gpu_utilization",
                    f"GPU {gpu} is MIG-enabled: NVML reports no utilisation of it",
                )
        return PcieLinkDown(
            gpu=gpu,
            after_calls=after_calls,
            width=levels["width"],
            generation=levels["generation"],
            gpu_utilization=busy,
        )

    def entry_to_yaml(self, entry: PcieLinkDown) -> dict[str, Any]:
        fields: dict[str, Any] = {"gpu": entry.gpu, "after_calls": entry.after_calls}
        for name in (*_LEVELS, "gpu_utilization"):
            if getattr(entry, name) is not None:
                fields[name] = getattr(entry, name)
        return fields

    def lower_entry(self, entry: PcieLinkDown) -> Iterator[Primitive]:
        for name, (_, _, value) in _LEVELS.items():
            level = getattr(entry, name)
            if level is not None:
                yield SetValue(gpu=entry.gpu, after_calls=entry.after_calls, value=value, to=level)
        if entry.gpu_utilization is not None:
            yield SetValue(
                gpu=entry.gpu,
                after_calls=entry.after_calls,
                value=GpuValue.GPU_UTILIZATION,
                to=entry.gpu_utilization,
            )


PCIE_LINK_DOWN = PcieLinksDown()
