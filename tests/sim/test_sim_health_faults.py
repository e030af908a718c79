"""Health faults: rows remapped, ECC errors that keep coming, Xids, and calls that fail.

Each is a kind under ``gfd/sim/faults/`` lowered to the machine file's generic records
(``fault_set``, ``fault_rise``, ``fault_event``), which the C library's one fault engine
acts on; the tests read the effect back through pynvml, and hold the YAML form, the
records and the refusals (file and field named) of each kind.
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

from gfd.base.errors import GfdError
from gfd.facts import FactsError, dump_facts
from gfd.sim import SimulationProfile, configure_library, load_profile
from gfd.sim.faults import (
    CallError,
    CriticalXid,
    EccRising,
    Faults,
    RowRemapping,
    fault_records,
    faults_to_dict,
    parse_faults,
)
from gfd.sim.faults.primitives import MAX_EVENTS
from gfd.sim.gpu_health import with_default_memory_health
from tests.sim import simulate_raw, without_memory_health

from .test_sim_health import realistic
from .test_sim_limits import HEADER, header_define
from .test_sim_nvml import nvml_fails

UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE = pynvml.NVML_VOLATILE_ECC
AGGREGATE = pynvml.NVML_AGGREGATE_ECC


def realistic_with(profile: str, faults: Faults) -> SimulationProfile:
    """A bundled profile with the memory health real drivers report, and ``faults``."""
    return SimulationProfile(facts=realistic(profile), faults=faults)


def test_rows_remapped_after_n_calls(nvml: ModuleType) -> None:
    faults = Faults(
        remapped_rows=(RowRemapping(gpu=2, after_calls=3, uncorrectable=2, pending=True),)
    )
    with simulate_raw(realistic_with("dgx-h100", faults)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(2)  # call 1
        assert nvml.nvmlDeviceGetRemappedRows(handle) == (0, 0, 0, 0)  # call 2
        assert nvml.nvmlDeviceGetRemappedRows(handle) == (0, 0, 0, 0)  # call 3
        for _ in range(2):
            assert nvml.nvmlDeviceGetRemappedRows(handle) == (0, 2, 1, 0)
        other = nvml.nvmlDeviceGetHandleByIndex(1)
        assert nvml.nvmlDeviceGetRemappedRows(other) == (0, 0, 0, 0)
        nvml.nvmlShutdown()


def test_a_later_remapping_fails_and_keeps_what_it_does_not_name(nvml: ModuleType) -> None:
    faults = Faults(
        remapped_rows=(
            RowRemapping(gpu=0, after_calls=1, correctable=4, pending=True),
            RowRemapping(gpu=0, after_calls=3, pending=False, failure=True),
        )
    )
    with simulate_raw(realistic_with("dgx-a100", faults)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert [nvml.nvmlDeviceGetRemappedRows(handle) for _ in range(3)] == [
            (4, 0, 1, 0),
            (4, 0, 1, 0),
            (4, 0, 0, 1),
        ]
        nvml.nvmlShutdown()


def test_uncorrected_ecc_errors_rise_with_every_call(nvml: ModuleType) -> None:
    faults = Faults(ecc_rising=(EccRising(gpu=0, after_calls=2, per_call=5),))
    with simulate_raw(realistic_with("t4-single", faults)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)  # call 1
        assert nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE) == 0  # call 2
        assert nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE) == 5  # call 3
        assert nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, AGGREGATE) == 10
        nvml.nvmlDeviceGetName(handle)  # any call on the GPU counts
        assert nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE) == 20
        corrected = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        assert nvml.nvmlDeviceGetTotalEccErrors(handle, corrected, VOLATILE) == 0
        nvml.nvmlShutdown()


def test_a_rising_count_stops_at_its_largest_value(
    nvml: ModuleType, lib: ctypes.CDLL, tmp_path: Path
) -> None:
    path = tmp_path / "machine.conf"
    path.write_text(
        "gfdsim-config 1\ngpu 0\nbus_id 0:7:0.0\nvalue ecc_current 1\n"
        f"value ecc_volatile_uncorrected {2**64 - 10}\n"
        f"fault_rise 0 0 ecc_volatile_uncorrected {2**63}\n"
    )
    configure_library(lib, path)
    try:
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        for _ in range(2):
            assert nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE) == 2**64 - 1
        nvml.nvmlShutdown()
    finally:
        configure_library(lib, None)


def test_a_value_can_become_not_supported(
    nvml: ModuleType, lib: ctypes.CDLL, tmp_path: Path
) -> None:
    # The generic record serves what no kind asks for yet: a counter the driver stops serving.
    path = tmp_path / "machine.conf"
    path.write_text(
        "gfdsim-config 1\ngpu 0\nbus_id 0:7:0.0\nvalue retired_pages_pending 0\n"
        "fault_set 0 2 retired_pages_pending -\n"
    )
    configure_library(lib, path)
    try:
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == 0
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        nvml.nvmlShutdown()
    finally:
        configure_library(lib, None)


def test_remapped_rows_not_supported_on_one_gpu_through_the_errors_fault(
    nvml: ModuleType,
) -> None:
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    faults = Faults(
        errors=(CallError(call="nvmlDeviceGetRemappedRows", code=not_supported, gpu=3),)
    )
    with simulate_raw(realistic_with("dgx-a100", faults)):
        nvml.nvmlInit()
        with nvml_fails(not_supported):
            nvml.nvmlDeviceGetRemappedRows(nvml.nvmlDeviceGetHandleByIndex(3))
        assert nvml.nvmlDeviceGetRemappedRows(nvml.nvmlDeviceGetHandleByIndex(2)) == (0, 0, 0, 0)
        nvml.nvmlShutdown()


def test_health_faults_round_trip_through_the_profile_yaml(tmp_path: Path) -> None:
    # Every GPU of the machine in MIG mode but GPU 1, whose rows can then be remapped.
    mig = load_profile("dgx-a100-mig-single").facts
    whole = dataclasses.replace(
        mig.gpus[1], mig_mode_current=False, mig_mode_pending=False, mig_devices=()
    )
    facts = with_default_memory_health(
        without_memory_health(dataclasses.replace(mig, gpus=(mig.gpus[0], whole, *mig.gpus[2:])))
    )
    profile = tmp_path / "machine.yaml"
    profile.write_text(
        dump_facts(facts) + "faults:\n"
        "  xid: [{gpu: 3, xid: 79, after_calls: 40}, {gpu: 0, xid: 43, after_calls: 0,"
        " times: 2, mig: 5}]\n"
        "  remapped_rows: [{gpu: 1, after_calls: 7, pending: true, failure: false,"
        " uncorrectable: 3}]\n"
        "  ecc_rising: [{gpu: 2, after_calls: 9, per_call: 4}]\n"
    )
    loaded = load_profile(str(profile))
    assert loaded.facts == facts
    assert loaded.faults == Faults(
        xid=(CriticalXid(3, 79, 40), CriticalXid(0, 43, 0, times=2, mig=5)),
        remapped_rows=(RowRemapping(1, 7, uncorrectable=3, pending=True, failure=False),),
        ecc_rising=(EccRising(2, 9, 4),),
    )
    document = faults_to_dict(loaded.faults)
    assert parse_faults(document, "<dict>", loaded.facts.gpus) == loaded.faults
    again = tmp_path / "again.yaml"
    again.write_text(dump_facts(facts) + yaml.safe_dump({"faults": document}))
    assert load_profile(str(again)).faults == loaded.faults
    assert fault_records(loaded.faults) == [
        "fault_event 3 40 0x8 79 1 -",
        "fault_event 0 0 0x8 43 2 5",
        "fault_set 1 7 remapped_rows_uncorrectable 3",
        "fault_set 1 7 remapped_rows_pending 1",
        "fault_set 1 7 remapped_rows_failure 0",
        "fault_rise 2 9 ecc_volatile_uncorrected 4",
        "fault_rise 2 9 ecc_aggregate_uncorrected 4",
    ]


@pytest.mark.parametrize(
    ("profile", "faults", "field", "problem"),
    [
        ("dgx-a100", {"xid": [{"gpu": 0, "after_calls": 1}]}, "xid[0].xid", "required"),
        ("dgx-a100", {"xid": [{"gpu": 0, "xid": 0, "after_calls": 1}]}, "xid[0].xid", "not an Xid"),
        (
            "dgx-a100",
            {"xid": [{"gpu": 0, "xid": 79, "after_calls": 1, "times": 65}]},
            "xid[0].times",
            "not 1 to 64",
        ),
        (
            "dgx-a100",
            {"xid": [{"gpu": 0, "xid": 79, "after_calls": 1, "mig": 0}]},
            "xid[0].mig",
            "GPU 0 has no MIG device 0 (its MIG devices: none)",
        ),
        (
            "dgx-a100",
            {"xid": [{"gpu": 8, "xid": 79, "after_calls": 1}]},
            "xid[0].gpu",
            "GPU 8 does not exist",
        ),
        (
            "dgx-a100",
            {"remapped_rows": [{"gpu": 0, "after_calls": 1}]},
            "remapped_rows[0]",
            "names no change",
        ),
        (
            "dgx-a100",
            {"remapped_rows": [{"gpu": 0, "after_calls": 1, "pending": 1}]},
            "remapped_rows[0].pending",
            "expected true or false",
        ),
        (
            "dgx-a100",
            {"remapped_rows": [{"gpu": 0, "after_calls": 1, "correctable": 2**32}]},
            "remapped_rows[0].correctable",
            "does not fit 32 bits",
        ),
        (
            "dgx1-v100",
            {"remapped_rows": [{"gpu": 0, "after_calls": 1, "pending": True}]},
            "remapped_rows[0].gpu",
            "GPU 0 reports no remapped rows",
        ),
        (
            "dgx-a100-mig-single",
            {"remapped_rows": [{"gpu": 0, "after_calls": 1, "pending": True}]},
            "remapped_rows[0].gpu",
            "GPU 0 reports no remapped rows",
        ),
        (
            "rtx4090x8",
            {"ecc_rising": [{"gpu": 0, "after_calls": 1, "per_call": 1}]},
            "ecc_rising[0].gpu",
            "GPU 0 reports no ECC error counts",
        ),
        (
            "dgx-a100",
            {"ecc_rising": [{"gpu": 0, "after_calls": 1}]},
            "ecc_rising[0].per_call",
            "required",
        ),
        (
            "dgx-a100",
            {"ecc_rising": [{"gpu": 0, "after_calls": 1, "per_call": 0}]},
            "ecc_rising[0].per_call",
            "is not 1 to",
        ),
        (
            "dgx-a100",
            {"ecc_rising": [{"gpu": 0, "after_calls": 1, "per_call": 1, "rate": 2}]},
            "ecc_rising[0].rate",
            "unknown field",
        ),
    ],
)
def test_bad_health_faults_name_file_and_field(
    profile: str, faults: dict[str, object], field: str, problem: str
) -> None:
    facts = realistic(profile)
    with pytest.raises(FactsError, match=re.escape(f"<here>: faults.{field}: ")) as raised:
        parse_faults(faults, "<here>", facts.gpus)
    assert problem in str(raised.value)


@pytest.mark.checkout_sources
def test_the_events_one_fault_posts_are_bounded_alike_in_python_and_c() -> None:
    assert header_define("SIM_EVENT_QUEUE") == MAX_EVENTS
    assert "#define SIM_MAX_EVENTS SIM_EVENT_QUEUE\n" in HEADER.read_text()


def test_health_faults_built_in_code_are_checked() -> None:
    facts = load_profile("t4-single").facts
    bad = SimulationProfile(facts=facts, faults=Faults(xid=(CriticalXid(0, 79, -1),)))
    where = re.escape("<profile>: faults.xid[0].after_calls: ")
    with pytest.raises(FactsError, match=where), simulate_raw(bad):
        pass


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        ("fault_set 0 1 ecc_current\n", "fault_set: expected GPU AFTER_CALLS NAME VALUE|-"),
        ("fault_set 1 1 ecc_current 1\n", "fault_set: GPU '1' does not exist"),
        ("fault_set 0 x ecc_current 1\n", "fault_set: AFTER_CALLS 'x' is not a count"),
        ("fault_set 0 1 ecc_colour 1\n", "fault_set: 'ecc_colour' is not a GPU value"),
        ("fault_set 0 1 ecc_current 2\n", "fault_set: '2' is not a value of ecc_current"),
        ("fault_rise 0 1 ecc_current 1\n", "fault_rise: ecc_current is not a count"),
        (
            "fault_rise 0 1 ecc_volatile_uncorrected 0\n",
            "fault_rise: PER_CALL '0' is not a count above 0",
        ),
        ("fault_event 0 1 8 79 1\n", "fault_event: expected GPU AFTER_CALLS TYPE DATA TIMES MIG|-"),
        ("fault_event 0 1 12 79 1 -\n", "fault_event: '12' is not one nvmlEventType bit"),
        ("fault_event 0 1 0x40 79 1 -\n", "fault_event: '0x40' is not one nvmlEventType bit"),
        ("fault_event 0 1 8 79 65 -\n", "fault_event: TIMES '65' is not 1 to 64"),
        ("fault_event 0 1 8 79 1 2\n", "fault_event: GPU 0 has no MIG device 2"),
    ],
)
def test_the_library_refuses_bad_health_fault_records(
    lib: ctypes.CDLL, tmp_path: Path, records: str, problem: str
) -> None:
    path = tmp_path / "machine.conf"
    path.write_text("gfdsim-config 1\ngpu 0\nbus_id 0:7:0.0\n" + records)
    with pytest.raises(GfdError, match=re.escape(f"{path}: line 4: {problem}")):
        configure_library(lib, path)
    configure_library(lib, None)
