"""The memory-health read (gfd.nvml.memory_health) through the simulator: what each kind
of GPU answers, what is asked once per session and what every read, and which NVML
errors leave a part absent and which fail the read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import pynvml
import pytest

from gfd.base.errors import NvmlGpuLost
from gfd.facts import MemoryHealth, NodeFacts, RemappedRows, RetiredPages
from gfd.nvml.calls import error_name
from gfd.nvml.reader import NvmlReader
from gfd.sim import SimulationProfile, load_profile, simulate, with_default_memory_health
from gfd.sim.faults import NO_FAULTS, CallError, Faults, RowRemapping
from tests.sim import without_memory_health

HOPPER_ROWS = MemoryHealth(
    ecc_enabled=True,
    remapped_rows=RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False),
    retired_pages=None,
    volatile_uncorrected_ecc=0,
)


def realistic(name: str, faults: Faults = NO_FAULTS) -> SimulationProfile:
    """A bundled profile whose GPUs report what real drivers do for their kind."""
    profile = load_profile(name)
    return dataclasses.replace(
        profile, facts=with_default_memory_health(profile.facts), faults=faults
    )


#: The calls of the memory-health read, whose absences the tests look at.
MEMORY_CALLS = (
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRetiredPages",
)


@contextmanager
def reader_of(
    profile: SimulationProfile | str, absent: dict[str, str] | None = None
) -> Iterator[NvmlReader]:
    """A reader of ``profile``; the memory-health calls found absent go to ``absent``."""

    def record(call: str, cause: str) -> None:
        if absent is not None and call in MEMORY_CALLS:
            absent[call] = cause

    with simulate(profile) as machine:
        nvml = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            on_absent=record,
        )
        try:
            yield nvml
        finally:
            nvml.close()


def health(facts: NodeFacts, gpu: int = 0) -> MemoryHealth | None:
    return facts.gpus[gpu].memory_health


def test_a_hopper_gpu_reports_remapped_rows_and_no_retired_pages() -> None:
    with reader_of(realistic("dgx-h100")) as nvml:
        facts = nvml.read()
    assert {gpu.memory_health for gpu in facts.gpus} == {HOPPER_ROWS}


def test_a_turing_gpu_reports_retired_pages_instead_of_rows() -> None:
    absent: dict[str, str] = {}
    with reader_of(realistic("t4-single"), absent) as nvml:
        assert health(nvml.read()) == MemoryHealth(
            ecc_enabled=True,
            remapped_rows=None,
            retired_pages=RetiredPages(single_bit=0, double_bit=0, pending=False),
            volatile_uncorrected_ecc=0,
        )
    assert absent == {"nvmlDeviceGetRemappedRows": "NVML_ERROR_NOT_SUPPORTED"}


def test_a_gpu_without_ecc_reports_nothing_and_the_read_goes_on() -> None:
    absent: dict[str, str] = {}
    # A GeForce board as most answer (the RTX 4090 of the bundled profile does more).
    geforce = with_default_memory_health(without_memory_health(load_profile("rtx4090x8").facts))
    with reader_of(SimulationProfile(facts=geforce), absent) as nvml:
        facts = nvml.read()
    assert [gpu.memory_health for gpu in facts.gpus] == [None] * 8
    # Without ECC the count is not asked; the pending status stands for the page lists.
    assert absent == {
        "nvmlDeviceGetEccMode": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetRemappedRows": "NVML_ERROR_NOT_SUPPORTED",
        "nvmlDeviceGetRetiredPagesPendingStatus": "NVML_ERROR_NOT_SUPPORTED",
    }


def test_a_profile_without_memory_health_reads_back_as_it_is() -> None:
    with reader_of("dgx-h100") as nvml:
        assert nvml.read() == load_profile("dgx-h100").facts


def test_counts_and_flags_are_read_again_every_cycle() -> None:
    # The first read of a session makes about 100 calls on GPU 1, a steady one about 25:
    # the remapping happens a few reads into the session, and that very read shows it.
    faults = Faults(remapped_rows=(RowRemapping(gpu=1, after_calls=150, pending=True),))
    with reader_of(realistic("dgx-h100", faults)) as nvml:
        seen = [health(nvml.read(), 1) for _ in range(6)]
    pending = [h.remapped_rows.pending for h in seen if h is not None and h.remapped_rows]
    assert pending[:2] == [False, False]
    assert pending[-1] is True


def test_the_ecc_mode_is_asked_once_per_session() -> None:
    # The mode's one failure (NOT_SUPPORTED) is remembered for the session: the mode is
    # not asked again, so ECC stays unknown until a new session asks.
    faults = Faults(
        errors=(
            CallError(
                call="nvmlDeviceGetEccMode", code=pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=0, times=1
            ),
        )
    )
    with reader_of(realistic("t4-single", faults)) as nvml:
        first = health(nvml.read())
        assert first is not None and first.ecc_enabled is None
        # Without the ECC mode, the ECC count is not asked either.
        assert first.volatile_uncorrected_ecc is None
        calls = nvml.last_calls
        again = health(nvml.read())
        assert again == first
        assert nvml.last_calls < calls
        nvml.close()
        assert (
            health(nvml.read())
            == with_default_memory_health(load_profile("t4-single").facts).gpus[0].memory_health
        )


def test_a_steady_read_of_a_hopper_gpu_adds_two_calls() -> None:
    with reader_of(realistic("dgx-h100")) as nvml:
        nvml.read()
        nvml.read()
        with_health = nvml.last_calls
    with reader_of(
        SimulationProfile(facts=without_memory_health(load_profile("dgx-h100").facts))
    ) as nvml:
        nvml.read()
        nvml.read()
        without = nvml.last_calls
    # Per GPU: the remapped rows and the ECC count (the mode is the session's).
    assert with_health - without == 2 * 8


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT]
)
def test_a_missing_or_refused_call_leaves_its_part_absent(code: int) -> None:
    faults = Faults(errors=(CallError(call="nvmlDeviceGetTotalEccErrors", code=code),))
    absent: dict[str, str] = {}
    with reader_of(realistic("dgx-h100", faults), absent) as nvml:
        facts = nvml.read()
    assert health(facts) == dataclasses.replace(HOPPER_ROWS, volatile_uncorrected_ecc=None)
    assert absent == {"nvmlDeviceGetTotalEccErrors": error_name(code)}


def test_a_lost_gpu_fails_the_read_naming_it() -> None:
    faults = Faults(
        errors=(
            CallError(call="nvmlDeviceGetRemappedRows", code=pynvml.NVML_ERROR_GPU_IS_LOST, gpu=2),
        )
    )
    with reader_of(realistic("dgx-h100", faults)) as nvml, pytest.raises(NvmlGpuLost) as lost:
        nvml.read()
    assert lost.value.gpu_index == 2
