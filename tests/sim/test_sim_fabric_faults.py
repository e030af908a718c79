"""The ``fabric`` fault: a GPU's fabric registration stuck, failed or degraded, from the start
or after N calls, lowered to ``fault_set`` of the GPU values ``fabric_state``,
``fabric_status`` and ``fabric_health_mask``; read back through pynvml's fabric calls (v3
struct and v1), with its YAML form, its records and its refusals.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re
from pathlib import Path
from types import ModuleType

import pynvml
import pytest
import yaml

from gfd.facts import FactsError, dump_facts
from gfd.sim import SimulationProfile, load_profile
from gfd.sim.faults import FabricChange, Faults, fault_records, faults_to_dict, parse_faults
from gfd.sim.faults.fabric import SETTABLE_STATES
from tests.sim import simulate_raw

#: nvml.h NVML_GPU_FABRIC_STATE_*.
IN_PROGRESS, COMPLETED = 2, 3
#: nvml.h nvmlGpuFabricInfo_v3.
FABRIC_INFO_V3 = 0x03000028


def fabric_of(nvml: ModuleType, handle: object) -> tuple[int, int, int]:
    """(state, status, healthMask) as ``nvmlDeviceGetGpuFabricInfoV`` answers with the v3 struct."""
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    info.version = FABRIC_INFO_V3
    nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    return int(info.state), int(info.status), int(info.healthMask)


def profile_with(name: str, *changes: FabricChange) -> SimulationProfile:
    return dataclasses.replace(load_profile(name), faults=Faults(fabric=changes))


def test_a_fabric_stuck_registering_from_the_start(nvml: ModuleType) -> None:
    stuck = profile_with("dgx-h100", FabricChange(gpu=1, after_calls=0, state="in-progress"))
    with simulate_raw(stuck):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(1)
        assert fabric_of(nvml, handle) == (IN_PROGRESS, 0, 0)
        assert fabric_of(nvml, nvml.nvmlDeviceGetHandleByIndex(0)) == (COMPLETED, 0, 0)
        nvml.nvmlShutdown()


def test_a_registration_that_fails_then_one_that_recovers(nvml: ModuleType) -> None:
    """Entries on one GPU apply in their order: failed after 2 calls, back after 4."""
    failing = profile_with(
        "gb200-nvl4",
        FabricChange(gpu=0, after_calls=2, status=999, health_mask=0x11),
        FabricChange(gpu=0, after_calls=4, status=0, health_mask=0),
    )
    with simulate_raw(failing):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)  # call 1
        assert fabric_of(nvml, handle) == (COMPLETED, 0, 0)  # call 2
        assert fabric_of(nvml, handle) == (COMPLETED, 999, 0x11)  # call 3
        info = nvml.c_nvmlGpuFabricInfo_t()
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))  # call 4, the v1 call
        assert (int(info.state), int(info.status)) == (COMPLETED, 999)
        assert fabric_of(nvml, handle) == (COMPLETED, 0, 0)  # call 5
        nvml.nvmlShutdown()


def test_fabric_faults_round_trip_through_the_profile_yaml(tmp_path: Path) -> None:
    facts = load_profile("gb200-nvl4").facts
    profile = tmp_path / "machine.yaml"
    profile.write_text(
        dump_facts(facts) + "faults:\n"
        "  fabric:\n"
        "  - {gpu: 0, after_calls: 0, state: in-progress}\n"
        "  - {gpu: 2, after_calls: 30, status: NVML_ERROR_UNKNOWN}\n"
        "  - {gpu: 3, after_calls: 5, health_mask: 0x10, status: SUCCESS}\n"
    )
    loaded = load_profile(str(profile))
    assert loaded.faults == Faults(
        fabric=(
            FabricChange(0, 0, state="in-progress"),
            FabricChange(2, 30, status=999),
            FabricChange(3, 5, status=0, health_mask=0x10),
        )
    )
    document = faults_to_dict(loaded.faults)
    again = tmp_path / "again.yaml"
    again.write_text(dump_facts(facts) + yaml.safe_dump({"faults": document}))
    assert load_profile(str(again)).faults == loaded.faults
    assert fault_records(loaded.faults) == [
        "fault_set 0 0 fabric_state 2",
        "fault_set 2 30 fabric_status 999",
        "fault_set 3 5 fabric_status 0",
        "fault_set 3 5 fabric_health_mask 16",
    ]


def test_the_settable_states_are_those_of_a_supported_fabric() -> None:
    assert SETTABLE_STATES == ("not-started", "in-progress", "completed")


@pytest.mark.parametrize(
    ("profile", "entry", "field", "problem"),
    [
        ("dgx-a100", {"gpu": 0, "after_calls": 0, "state": "in-progress"}, "gpu",
         "GPU 0 has no fabric to change (its facts' fabric is null)"),
        ("dgx-h100", {"gpu": 0, "after_calls": 0}, "",
         "names no change (give one of: state, status, health_mask)"),
        ("dgx-h100", {"gpu": 0, "after_calls": 0, "state": "not-supported"}, "state",
         "'not-supported' is not a fabric state (one of: not-started, in-progress, completed)"),
        ("dgx-h100", {"gpu": 0, "after_calls": 0, "status": "NVML_ERROR_SOMETHING"}, "status",
         "is not an NVML error name"),
        ("dgx-h100", {"gpu": 0, "after_calls": 0, "health_mask": 2**32}, "health_mask",
         "does not fit 32 bits"),
        ("dgx-h100", {"gpu": 0, "after_calls": 0, "health_mask": -1}, "health_mask",
         "must not be negative"),
        ("dgx-h100", {"gpu": 9, "after_calls": 0, "state": "completed"}, "gpu",
         "GPU 9 does not exist"),
        ("dgx-h100", {"gpu": 0, "after_calls": 0, "mask": 1}, "mask", "unknown field"),
    ],
)  # fmt: skip
def test_bad_fabric_faults_name_file_and_field(
    profile: str, entry: dict[str, object], field: str, problem: str
) -> None:
    gpus = load_profile(profile).facts.gpus
    where = "faults.fabric[0]" + (f".{field}" if field else "")
    with pytest.raises(FactsError, match=re.escape(f"<here>: {where}: ")) as raised:
        parse_faults({"fabric": [entry]}, "<here>", gpus)
    assert problem in str(raised.value)


def test_a_driver_without_a_health_mask_takes_none() -> None:
    facts = load_profile("gb200-nvl4").facts
    v1 = dataclasses.replace(facts.gpus[0].fabric, health_mask=None)  # type: ignore[arg-type]
    gpus = (dataclasses.replace(facts.gpus[0], fabric=v1), *facts.gpus[1:])
    with pytest.raises(FactsError, match="fabric.health_mask is null"):
        parse_faults({"fabric": [{"gpu": 0, "after_calls": 0, "health_mask": 1}]}, "<here>", gpus)
