"""The PCIe link read (gfd.nvml.pcie) through the simulator: what is asked once per session
and what every read, when utilisation is asked, and which NVML errors leave a value absent
and which fail the read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import pynvml
import pytest

from gfd.base.errors import NvmlGpuLost
from gfd.facts import NodeFacts, PcieLink
from gfd.nvml.calls import error_name
from gfd.nvml.reader import NvmlReader
from gfd.sim import SimulationProfile, load_profile, simulate
from gfd.sim.faults import NO_FAULTS, CallError, Faults, PcieLinkDown, PcieReplays

H100 = PcieLink(5, 16, 5, 16, 5, 0)
PCIE_CALLS = (
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetUtilizationRates",
)


def profile(name: str, faults: Faults = NO_FAULTS, *, pcie: bool = True) -> SimulationProfile:
    facts = load_profile(name).facts
    if not pcie:
        facts = dataclasses.replace(
            facts, gpus=tuple(dataclasses.replace(g, pcie=None) for g in facts.gpus)
        )
    return SimulationProfile(facts=facts, faults=faults)


@contextmanager
def reader_of(
    machine: SimulationProfile, absent: dict[str, str] | None = None
) -> Iterator[NvmlReader]:
    """A reader of ``machine``; the PCIe calls found absent go to ``absent``."""

    def record(call: str, cause: str) -> None:
        if absent is not None and call in PCIE_CALLS:
            absent[call] = cause

    with simulate(machine) as served:
        nvml = NvmlReader(
            library_path=served.library_path,
            sysfs_root=served.sysfs_root,
            machine_type_file=served.machine_type_file,
            on_absent=record,
        )
        try:
            yield nvml
        finally:
            nvml.close()


def calls_of(machine: SimulationProfile, reads: int) -> list[int]:
    with reader_of(machine) as nvml:
        counts = []
        for _ in range(reads):
            nvml.read()
            counts.append(nvml.last_calls)
    return counts


def test_a_healthy_link_costs_three_calls_a_read_and_none_answered_costs_none() -> None:
    """The maxima are the GPU's and its slot's: asked once per session, as is every call of
    a GPU that answers none of it; the current link and the replay counter every read;
    utilisation not at all while the link is at its best."""
    with_link = calls_of(profile("dgx-h100"), 3)
    without = calls_of(profile("dgx-h100", pcie=False), 3)
    assert [a - b for a, b in zip(with_link, without, strict=True)] == [0, 3 * 8, 3 * 8]
    assert without[1] == without[2] < without[0]


def test_utilisation_is_asked_only_while_the_generation_is_below_reach() -> None:
    slow = Faults(
        pcie_link_down=(PcieLinkDown(gpu=4, after_calls=0, generation=2, gpu_utilization=70),)
    )
    narrow = Faults(pcie_link_down=(PcieLinkDown(gpu=4, after_calls=0, width=8),))
    healthy = calls_of(profile("dgx-h100"), 2)
    assert [
        a - b for a, b in zip(calls_of(profile("dgx-h100", slow), 2), healthy, strict=True)
    ] == [
        1,
        1,
    ]
    assert calls_of(profile("dgx-h100", narrow), 2) == healthy
    with reader_of(profile("dgx-h100", slow)) as nvml:
        link = nvml.read().gpus[4].pcie
    assert link == dataclasses.replace(H100, current_generation=2, gpu_utilization=70)


def test_the_current_link_and_the_replays_are_read_again_every_cycle() -> None:
    # A steady read makes about 25 calls on a GPU: the fault lands a few reads in.
    faults = Faults(
        pcie_link_down=(PcieLinkDown(gpu=1, after_calls=200, width=4),),
        pcie_replays=(PcieReplays(gpu=1, after_calls=200, per_call=1),),
    )
    with reader_of(profile("dgx-h100", faults)) as nvml:
        seen = [nvml.read().gpus[1].pcie for _ in range(8)]
    assert seen[0] == H100
    last = seen[-1]
    assert last is not None and last.current_width == 4 and last.max_width == 16
    assert last.replay_counter is not None and last.replay_counter > 0


def test_the_maxima_are_asked_once_per_session() -> None:
    # The maximum width's one failure is remembered for the session, not asked again.
    faults = Faults(
        errors=(
            CallError(
                call="nvmlDeviceGetMaxPcieLinkWidth",
                code=pynvml.NVML_ERROR_NOT_SUPPORTED,
                gpu=0,
                times=1,
            ),
        )
    )
    with reader_of(profile("t4-single", faults)) as nvml:
        first = nvml.read().gpus[0].pcie
        assert first is not None and first.max_width is None
        assert nvml.read().gpus[0].pcie == first
        nvml.close()
        assert nvml.read() == load_profile("t4-single").facts


def test_a_gpu_that_answers_none_of_it_has_no_block() -> None:
    absent: dict[str, str] = {}
    with reader_of(profile("gb200-nvl4"), absent) as nvml:
        facts: NodeFacts = nvml.read()
    assert [gpu.pcie for gpu in facts.gpus] == [None] * 4
    assert set(absent.values()) == {"NVML_ERROR_NOT_SUPPORTED"}
    assert "nvmlDeviceGetUtilizationRates" not in absent


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT]
)
def test_a_missing_or_refused_call_leaves_its_value_absent(code: int) -> None:
    faults = Faults(errors=(CallError(call="nvmlDeviceGetPcieReplayCounter", code=code),))
    absent: dict[str, str] = {}
    with reader_of(profile("dgx-h100", faults), absent) as nvml:
        link = nvml.read().gpus[0].pcie
    assert link == dataclasses.replace(H100, replay_counter=None)
    assert absent == {"nvmlDeviceGetPcieReplayCounter": error_name(code)}


def test_a_lost_gpu_fails_the_read_naming_it() -> None:
    faults = Faults(
        errors=(
            CallError(
                call="nvmlDeviceGetCurrPcieLinkWidth", code=pynvml.NVML_ERROR_GPU_IS_LOST, gpu=3
            ),
        )
    )
    with reader_of(profile("dgx-h100", faults)) as nvml, pytest.raises(NvmlGpuLost) as lost:
        nvml.read()
    assert lost.value.gpu_index == 3
