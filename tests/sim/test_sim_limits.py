"""The simulator's bounds and its delay fault.

The C library refuses a machine file past gfd's limits (``gfd.facts.limits``, which gfd
checks first), so no simulated machine is larger than a real node can be. A ``delays``
fault makes a call take a while, as NVML does on a driver that initialises slowly or a GPU
that hangs: what gfd does then (a stop signal must still end it) is tested in
``tests/app/test_stop_signal.py``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re
import time
from pathlib import Path
from types import ModuleType

import pytest

from gfd.facts import FactsError
from gfd.facts.limits import MAX_GPUS, MAX_MIG_DEVICES, MAX_NVLINKS
from gfd.sim import (
    CallDelay,
    CallError,
    Faults,
    SimulationProfile,
    configure_library,
    load_profile,
)
from gfd.sim.faults import faults_to_dict
from gfd.sim.machine_file import NVLINK_MAX_LINKS, render_machine_file
from tests.sim import simulate_raw

from .test_sim_nvml import nvml_fails

HEADER = Path(__file__).resolve().parents[2] / "gfd" / "sim" / "nvmlsim.h"


def header_define(name: str) -> int:
    match = re.search(rf"^#define {name} (\d+)u?$", HEADER.read_text(), re.MULTILINE)
    assert match, f"{name} is not defined in {HEADER}"
    return int(match.group(1))


@pytest.mark.checkout_sources
def test_the_c_limits_are_gfds() -> None:
    assert header_define("SIM_MAX_GPUS") == MAX_GPUS
    assert header_define("SIM_MAX_MIG_DEVICES") == MAX_MIG_DEVICES
    assert NVLINK_MAX_LINKS == MAX_NVLINKS


def gpu_records(count: int) -> str:
    return "".join(
        f"gpu {i}\nbus_id 00000000:{i % 256:02X}:{i // 256:02X}.0\n" for i in range(count)
    )


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        (gpu_records(MAX_GPUS + 1), f"line {2 * MAX_GPUS + 2}: gpu: more than the limit of 128"),
        (gpu_records(1) + "mig_mode 1 1\nmig 16\n", "line 5: mig: MIG index 16 is not below"),
        (gpu_records(1) + "max_mig_devices 17\n", "line 4: max_mig_devices: 17 is more than"),
        (
            gpu_records(1) + "fault_delay nvmlDeviceGetName 0 - -\n",
            "line 4: fault_delay: '0' is not a delay of 1 to 3600000 ms",
        ),
    ],
)
def test_the_library_refuses_a_machine_file_past_a_limit(
    lib: ctypes.CDLL, records: str, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "machine.conf"
    path.write_text("gfdsim-config 1\n" + records)
    with pytest.raises(Exception, match=re.escape(f"{path}: {problem}")):
        configure_library(lib, path)
    configure_library(lib, None)


def test_the_most_gpus_load(lib: ctypes.CDLL, tmp_path: Path) -> None:
    path = tmp_path / "machine.conf"
    path.write_text("gfdsim-config 1\n" + gpu_records(MAX_GPUS))
    configure_library(lib, path)
    count = ctypes.c_uint()
    assert lib.nvmlInitWithFlags(0) == 0
    assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value == MAX_GPUS
    assert lib.nvmlShutdown() == 0
    configure_library(lib, None)


def with_faults(name: str, faults: Faults) -> SimulationProfile:
    return dataclasses.replace(load_profile(name), faults=faults)


def timed(call: object, *args: object) -> float:
    started = time.monotonic()
    call(*args)  # type: ignore[operator]
    return time.monotonic() - started


def test_a_delayed_call_takes_its_time_for_its_gpu_and_its_count(nvml: ModuleType) -> None:
    # A delay is at least as long as asked whatever the load; calls without one take
    # microseconds, far from the half second that tells the two apart.
    delay = CallDelay(call="nvmlDeviceGetName", seconds=0.5, gpu=1, times=1)
    with simulate_raw(with_faults("pcie-l4x4", Faults(delays=(delay,)))):
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        assert timed(nvml.nvmlDeviceGetName, handles[1]) >= 0.5
        # The other GPU, and the same GPU after its one delayed call, are not delayed.
        started = time.monotonic()
        for _ in range(2):
            nvml.nvmlDeviceGetName(handles[0])
            nvml.nvmlDeviceGetName(handles[1])
        assert time.monotonic() - started < 0.5
        nvml.nvmlShutdown()


def test_a_delay_comes_before_an_injected_error(nvml: ModuleType) -> None:
    faults = Faults(
        errors=(CallError(call="nvmlSystemGetDriverVersion", code=999),),
        delays=(CallDelay(call="nvmlSystemGetDriverVersion", seconds=0.1),),
    )
    with simulate_raw(with_faults("t4-single", faults)):
        nvml.nvmlInit()
        started = time.monotonic()
        with nvml_fails(999):
            nvml.nvmlSystemGetDriverVersion()
        assert time.monotonic() - started >= 0.1
        nvml.nvmlShutdown()


def test_delays_render_in_milliseconds_and_round_trip() -> None:
    faults = Faults(
        delays=(CallDelay("nvmlInit_v2", 1.5), CallDelay("nvmlDeviceGetUUID", 0.01, 0, 3))
    )
    text = render_machine_file(load_profile("t4-single").facts, faults)
    assert "fault_delay nvmlInit_v2 1500 - -" in text.splitlines()
    assert "fault_delay nvmlDeviceGetUUID 10 0 3" in text.splitlines()
    assert faults_to_dict(faults)["delays"] == [
        {"call": "nvmlInit_v2", "seconds": 1.5},
        {"call": "nvmlDeviceGetUUID", "seconds": 0.01, "gpu": 0, "times": 3},
    ]


@pytest.mark.parametrize(
    ("delay", "field", "problem"),
    [
        (CallDelay("nvmlDeviceGetNmae", 1), "call", "did you mean nvmlDeviceGetName"),
        (CallDelay("nvmlDeviceGetName", 0), "seconds", "0 is not between 0.001 and 3600"),
        (CallDelay("nvmlDeviceGetName", 3601), "seconds", "3601 is not between"),
        (CallDelay("nvmlDeviceGetName", 1, gpu=4), "gpu", "GPU 4 does not exist"),
        (CallDelay("nvmlDeviceGetName", 1, times=-1), "times", "must not be negative"),
    ],
)
def test_bad_delays_are_refused_naming_the_field(
    delay: CallDelay, field: str, problem: str
) -> None:
    profile = SimulationProfile(
        facts=load_profile("t4-single").facts, faults=Faults(delays=(delay,))
    )
    where = re.escape(f"<profile>: faults.delays[0].{field}: ")
    with pytest.raises(FactsError, match=where) as raised, simulate_raw(profile):
        pass
    assert problem in str(raised.value)
