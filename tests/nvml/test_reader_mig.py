"""The reader's MIG path against the simulator: devices, empty slots, profile lookup, errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from gfd.base.errors import NvmlError
from gfd.facts import NodeFacts
from gfd.nvml.reader import read_facts
from gfd.sim import CallError, Faults, SimulationProfile, load_profile, simulate

MIG_FIXTURE = str(Path(__file__).parents[1] / "sim" / "fixtures" / "dgx-a100-mig.yaml")


def read(profile: SimulationProfile | str) -> NodeFacts:
    with simulate(profile) as machine:
        return read_facts(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )


def test_mig_devices_round_trip_with_empty_slots_skipped() -> None:
    expected = load_profile(MIG_FIXTURE).facts
    facts = read(MIG_FIXTURE)
    assert facts == expected
    # Seven slots per GPU, four used: the reader skipped three NOT_FOUND slots per GPU.
    assert [len(g.mig_devices) for g in facts.gpus] == [4, 4, 4, 4, 7, 7, 7, 7]


def test_mig_devices_with_gaps_in_their_indices() -> None:
    facts = load_profile(MIG_FIXTURE).facts
    gpu = facts.gpus[0]
    gapped = tuple(replace(m, index=2 * m.index) for m in gpu.mig_devices)
    changed = replace(facts, gpus=(replace(gpu, mig_devices=gapped), *facts.gpus[1:]))
    assert read(SimulationProfile(facts=changed)) == changed


def test_mig_disabled_gpus_are_not_asked_for_mig_devices() -> None:
    facts = load_profile("dgx-a100").facts
    # Any MIG device query would fail the read: none may be made.
    never = Faults(
        errors=(CallError(call="nvmlDeviceGetMaxMigDeviceCount", code=pynvml.NVML_ERROR_UNKNOWN),)
    )
    assert read(SimulationProfile(facts=facts, faults=never)) == facts


@pytest.mark.parametrize(
    "call",
    [
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetAttributes_v2",
        "nvmlDeviceGetGpuInstanceById",
        "nvmlGpuInstanceGetInfo",
    ],
)
def test_a_failing_mig_call_fails_the_read_with_its_name(call: str) -> None:
    profile = load_profile(MIG_FIXTURE)
    faults = Faults(errors=(CallError(call=call, code=pynvml.NVML_ERROR_UNKNOWN, gpu=2),))
    with pytest.raises(NvmlError) as info:
        read(SimulationProfile(facts=profile.facts, faults=faults))
    assert info.value.name == "NVML_ERROR_UNKNOWN"
    assert info.value.call.startswith(call.removesuffix("_v2"))


def test_gpu_instance_profiles_the_driver_does_not_report_are_an_error() -> None:
    profile = load_profile(MIG_FIXTURE)
    hidden = Faults(
        errors=(
            CallError(
                call="nvmlDeviceGetGpuInstanceProfileInfoV",
                code=pynvml.NVML_ERROR_NOT_SUPPORTED,
                gpu=0,
            ),
        )
    )
    with pytest.raises(NvmlError, match="uses GPU instance profile 9"):
        read(SimulationProfile(facts=profile.facts, faults=hidden))
