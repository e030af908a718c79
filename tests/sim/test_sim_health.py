"""Memory health through the simulator: ECC mode and counts, remapped rows, retired pages.

A GPU serves its facts' ``memory_health`` as written (null parts NOT_SUPPORTED), so gfd's
reader reads back what the facts say. ``with_default_memory_health`` gives GPUs without it
what real drivers answer (``gfd.sim.gpu_health``): data-center Ampere and later report ECC
on and rows remapped, with retired pages NOT_SUPPORTED; Kepler to Turing report retired
pages and no remapped rows; GeForce boards have no ECC. A replayed capture of a real H200
holds those defaults to what the real driver answered. Every test goes through pynvml or
ctypes against the library, as a health check would.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from gfd.base.errors import GfdError
from gfd.facts import FactsError, Gpu, MemoryHealth, NodeFacts, RemappedRows, RetiredPages
from gfd.nvml.branches import EMULATED_BRANCHES, driver_branch, exported_in
from gfd.sim import SimulationProfile, configure_library, library_path, load_profile
from gfd.sim.branch_library import dynamic_exports, hidden_in, write_without_exports
from gfd.sim.faults import Faults, GpuLost
from gfd.sim.gpu_health import (
    MEMORY_ERROR_EVENTS,
    EventType,
    GpuValue,
    default_memory_health,
    supported_event_types,
    with_default_memory_health,
)
from tests.oracles import oracle_path
from tests.sim import read_simulated, simulate_raw, without_memory_health

from .test_sim_nvml import nvml_fails

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
SINGLE_BIT = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
DOUBLE_BIT = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
VOLATILE = pynvml.NVML_VOLATILE_ECC
AGGREGATE = pynvml.NVML_AGGREGATE_ECC

#: Captures of real GPUs, each with the answers of its health calls (``probe.json``).
REAL_GPU = Path(__file__).resolve().parents[1] / "records" / "real-gpu"

#: The health calls this simulator serves (issue 26), each exported by every real branch.
HEALTH_CALLS = (
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPages_v2",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlEventSetWait",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)


@contextlib.contextmanager
def machine_file(lib: ctypes.CDLL, tmp_path: Path, records: str) -> Iterator[None]:
    """Serve a hand-written machine file of one GPU plus ``records`` (for that GPU)."""
    path = tmp_path / "machine.conf"
    path.write_text("gfdsim-config 1\ngpu 0\nbus_id 00000000:07:00.0\n" + records)
    configure_library(lib, path)
    try:
        yield
    finally:
        configure_library(lib, None)


def realistic(profile: str) -> NodeFacts:
    """A bundled profile whose GPUs report what real drivers do of their memory."""
    return with_default_memory_health(load_profile(profile).facts)


def ecc_counts(nvml: ModuleType, handle: object) -> dict[tuple[int, int], int]:
    return {
        (kind, counter): nvml.nvmlDeviceGetTotalEccErrors(handle, kind, counter)
        for kind in (CORRECTED, UNCORRECTED)
        for counter in (VOLATILE, AGGREGATE)
    }


# --------------------------------------------------------------------------- defaults


@pytest.mark.parametrize("profile", ["dgx-a100", "dgx-h100", "gb200-nvl4", "pcie-l4x4"])
def test_data_center_gpus_from_ampere_on_remap_rows_and_retire_no_pages(
    nvml: ModuleType, profile: str
) -> None:
    with simulate_raw(realistic(profile)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetEccMode(handle) == [1, 1]
        assert set(ecc_counts(nvml, handle).values()) == {0}
        assert nvml.nvmlDeviceGetRemappedRows(handle) == (0, 0, 0, 0)
        for call in (nvml.nvmlDeviceGetRetiredPages, nvml.nvmlDeviceGetRetiredPages_v2):
            for cause in (SINGLE_BIT, DOUBLE_BIT):
                with nvml_fails(NOT_SUPPORTED):
                    call(handle, cause)
        with nvml_fails(NOT_SUPPORTED):
            nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        nvml.nvmlShutdown()


@pytest.mark.parametrize("profile", ["t4-single", "dgx1-v100", "k80-pcie-tree"])
def test_data_center_gpus_before_ampere_retire_pages_and_remap_no_rows(
    nvml: ModuleType, profile: str
) -> None:
    with simulate_raw(realistic(profile)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetEccMode(handle) == [1, 1]
        assert set(ecc_counts(nvml, handle).values()) == {0}
        assert nvml.nvmlDeviceGetRetiredPages(handle, SINGLE_BIT) == []
        assert nvml.nvmlDeviceGetRetiredPages_v2(handle, DOUBLE_BIT) == []
        assert nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == 0
        with nvml_fails(NOT_SUPPORTED):
            nvml.nvmlDeviceGetRemappedRows(handle)
        nvml.nvmlShutdown()


@pytest.mark.parametrize(
    "facts",
    [
        with_default_memory_health(without_memory_health(load_profile("rtx4090x8").facts)),
        without_memory_health(load_profile("dgx-h100").facts),
    ],
)
def test_geforce_boards_and_gpus_without_memory_health_report_none(
    nvml: ModuleType, facts: NodeFacts
) -> None:
    with simulate_raw(facts):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        for call, args in (
            (nvml.nvmlDeviceGetEccMode, ()),
            (nvml.nvmlDeviceGetTotalEccErrors, (UNCORRECTED, VOLATILE)),
            (nvml.nvmlDeviceGetRemappedRows, ()),
            (nvml.nvmlDeviceGetRetiredPages, (SINGLE_BIT,)),
            (nvml.nvmlDeviceGetRetiredPagesPendingStatus, ()),
        ):
            with nvml_fails(NOT_SUPPORTED):
                call(handle, *args)
        nvml.nvmlShutdown()


def gpu(brand: int | None, architecture: int | None, **fields: object) -> Gpu:
    return Gpu(
        index=0,
        name="GPU",
        uuid="GPU-0",
        bus_id="00000000:07:00.0",
        brand=brand,
        architecture=architecture,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("brand", "architecture", "expected"),
    [
        (14, 9, MemoryHealth(True, RemappedRows(0, 0, False, False), None, 0)),
        (2, 5, MemoryHealth(True, None, RetiredPages(0, 0, False), 0)),
        (2, 0xFFFFFFFF, MemoryHealth(True, None, None, 0)),
        (2, None, MemoryHealth(True, None, None, 0)),
        (13, 8, MemoryHealth(ecc_enabled=False)),
        (5, 8, None),
        (None, 7, None),
    ],
)
def test_defaults_follow_brand_and_architecture(
    brand: int | None, architecture: int | None, expected: MemoryHealth | None
) -> None:
    assert default_memory_health(gpu(brand, architecture)) == expected


def test_supported_events_are_every_type_less_memory_errors_without_ecc() -> None:
    every = supported_event_types(default_memory_health(gpu(14, 9)))
    assert every == 0xFF9F  # nvmlEventTypeAll, as the real H200 answered
    without_memory_errors = every & ~MEMORY_ERROR_EVENTS
    assert supported_event_types(default_memory_health(gpu(13, 8))) == without_memory_errors
    assert supported_event_types(None) == without_memory_errors
    assert without_memory_errors & EventType.XID_CRITICAL_ERROR


#: What the probe of a real GPU asked (``scripts/nvml_health_probe.py``), asked through pynvml.
PROBED_CALLS: dict[str, Callable[[ModuleType, object], object]] = {
    "nvmlDeviceGetEccMode": lambda nvml, h: nvml.nvmlDeviceGetEccMode(h),
    "nvmlDeviceGetRemappedRows": lambda nvml, h: list(nvml.nvmlDeviceGetRemappedRows(h)),
    "nvmlDeviceGetRetiredPages(double_bit)": lambda nvml, h: nvml.nvmlDeviceGetRetiredPages(
        h, DOUBLE_BIT
    ),
    "nvmlDeviceGetRetiredPages(multiple_single_bit)": lambda nvml, h: (
        nvml.nvmlDeviceGetRetiredPages(h, SINGLE_BIT)
    ),
    "nvmlDeviceGetRetiredPagesPendingStatus": lambda nvml, h: (
        nvml.nvmlDeviceGetRetiredPagesPendingStatus(h)
    ),
    "nvmlDeviceGetSupportedEventTypes": lambda nvml, h: nvml.nvmlDeviceGetSupportedEventTypes(h),
    "nvmlDeviceGetTotalEccErrors(corrected,volatile)": lambda nvml, h: (
        nvml.nvmlDeviceGetTotalEccErrors(h, CORRECTED, VOLATILE)
    ),
    "nvmlDeviceGetTotalEccErrors(uncorrected,aggregate)": lambda nvml, h: (
        nvml.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, AGGREGATE)
    ),
    "nvmlDeviceGetTotalEccErrors(uncorrected,volatile)": lambda nvml, h: (
        nvml.nvmlDeviceGetTotalEccErrors(h, UNCORRECTED, VOLATILE)
    ),
}
#: Probed, and not served by the simulator (docs/simulator.md, *What it does not model*).
NOT_SIMULATED = {"nvmlDeviceGetRowRemapperHistogram"}
CAPTURES = sorted(path.parent for path in REAL_GPU.glob("*/probe.json"))


def test_there_is_a_probed_real_gpu() -> None:
    assert CAPTURES, f"no probe.json under {REAL_GPU}"


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_a_replayed_capture_answers_the_health_calls_as_the_real_gpu_did(
    nvml: ModuleType, capture: Path
) -> None:
    probe = json.loads((capture / "probe.json").read_text())
    errors = {getattr(pynvml, name): name for name in dir(pynvml) if name.startswith("NVML_ERROR_")}
    # A capture whose facts predate memory health gets the defaults for its GPU; one made
    # since serves the memory health gfd read on the real GPU. The real driver's answers
    # judge either.
    with simulate_raw(with_default_memory_health(load_profile(str(capture / "facts.yaml")).facts)):
        nvml.nvmlInit()
        for real in probe["gpus"]:
            handle = nvml.nvmlDeviceGetHandleByIndex(real["index"])
            assert set(real["calls"]) == PROBED_CALLS.keys() | NOT_SIMULATED
            for name, ask in PROBED_CALLS.items():
                try:
                    answer = {"value": ask(nvml, handle)}
                except pynvml.NVMLError as exc:
                    answer = {"error": errors[exc.value]}
                expected = {k: v for k, v in real["calls"][name].items() if k in answer}
                assert answer == expected, f"GPU {real['index']}: {name}"
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- values


def test_the_facts_memory_health_is_served_as_written(nvml: ModuleType) -> None:
    facts = load_profile("mixed-a100-h100").facts
    written = (
        MemoryHealth(True, RemappedRows(5, 2, True, False), None, 7),
        MemoryHealth(True, None, RetiredPages(3, 1, True), None),
        MemoryHealth(ecc_enabled=False, remapped_rows=RemappedRows(0, 1, False, True)),
    )
    gpus = tuple(
        dataclasses.replace(gpu, memory_health=health)
        for gpu, health in zip(facts.gpus, (*written, None, None, None), strict=True)
    )
    with simulate_raw(dataclasses.replace(facts, gpus=gpus)):
        nvml.nvmlInit()
        h = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        assert nvml.nvmlDeviceGetRemappedRows(h[0]) == (5, 2, 1, 0)
        assert nvml.nvmlDeviceGetTotalEccErrors(h[0], UNCORRECTED, VOLATILE) == 7
        assert len(nvml.nvmlDeviceGetRetiredPages(h[1], SINGLE_BIT)) == 3
        assert len(nvml.nvmlDeviceGetRetiredPages(h[1], DOUBLE_BIT)) == 1
        assert nvml.nvmlDeviceGetRetiredPagesPendingStatus(h[1]) == 1
        with nvml_fails(NOT_SUPPORTED):  # ECC on, and the count not reported
            nvml.nvmlDeviceGetTotalEccErrors(h[1], UNCORRECTED, VOLATILE)
        assert nvml.nvmlDeviceGetEccMode(h[2]) == [0, 0]
        assert nvml.nvmlDeviceGetRemappedRows(h[2]) == (0, 1, 0, 1)
        with nvml_fails(NOT_SUPPORTED):
            nvml.nvmlDeviceGetEccMode(h[3])
        nvml.nvmlShutdown()


@pytest.mark.parametrize(
    "facts",
    [
        realistic(profile)
        for profile in (
            "dgx-h100",
            "t4-single",
            "rtx4090x8",
            "dgx-a100-mig-single",
            "k80-pcie-tree",
        )
    ],
    ids=lambda facts: facts.gpus[0].name,
)
def test_memory_health_round_trips_through_the_reader(facts: NodeFacts) -> None:
    assert read_simulated(facts) == facts


def test_written_memory_health_round_trips_through_the_reader() -> None:
    facts = load_profile("mixed-a100-h100").facts
    written = (
        MemoryHealth(True, RemappedRows(5, 2, True, False), None, 7),
        MemoryHealth(True, None, RetiredPages(3, 1, True), None),
        MemoryHealth(ecc_enabled=False, remapped_rows=RemappedRows(0, 1, False, True)),
        MemoryHealth(ecc_enabled=True),
        None,
        MemoryHealth(True, RemappedRows(2**32 - 1, 0, False, False), None, 2**64 - 1),
    )
    gpus = tuple(
        dataclasses.replace(gpu, memory_health=health)
        for gpu, health in zip(facts.gpus, written, strict=True)
    )
    facts = dataclasses.replace(facts, gpus=gpus)
    assert read_simulated(facts) == facts


@pytest.mark.parametrize(
    ("profile", "health", "field", "problem"),
    [
        ("dgx-h100", MemoryHealth(), "memory_health", "write memory_health: null"),
        (
            "dgx-h100",
            MemoryHealth(True, RemappedRows(0, 0, False, False), RetiredPages(0, 0, False), 0),
            "memory_health.retired_pages",
            "not both",
        ),
        (
            "dgx-h100",
            MemoryHealth(ecc_enabled=False, volatile_uncorrected_ecc=0),
            "memory_health.volatile_uncorrected_ecc",
            "only with ECC on",
        ),
        (
            "dgx-a100-mig-single",
            MemoryHealth(True, RemappedRows(0, 0, False, False), None, 0),
            "memory_health.remapped_rows",
            "in MIG mode with MIG devices",
        ),
    ],
)
def test_memory_health_nvml_could_not_report_is_refused(
    profile: str, health: MemoryHealth, field: str, problem: str
) -> None:
    facts = load_profile(profile).facts
    gpus = (dataclasses.replace(facts.gpus[0], memory_health=health), *facts.gpus[1:])
    with (
        pytest.raises(FactsError, match=re.escape(f"<facts>: gpus[0].{field}: ")) as raised,
        simulate_raw(dataclasses.replace(facts, gpus=gpus)),
    ):
        pass
    assert problem in str(raised.value)


def test_values_of_the_machine_file_are_served_as_given(
    nvml: ModuleType, lib: ctypes.CDLL, tmp_path: Path
) -> None:
    records = "".join(
        f"value {name} {value}\n"
        for name, value in (
            (GpuValue.ECC_CURRENT, 1),
            (GpuValue.ECC_PENDING, 0),
            (GpuValue.ECC_VOLATILE_CORRECTED, 11),
            (GpuValue.ECC_VOLATILE_UNCORRECTED, 2),
            (GpuValue.ECC_AGGREGATE_CORRECTED, 40),
            (GpuValue.ECC_AGGREGATE_UNCORRECTED, 2**64 - 1),
            (GpuValue.REMAPPED_ROWS_CORRECTABLE, 5),
            (GpuValue.REMAPPED_ROWS_UNCORRECTABLE, 2**32 - 1),
            (GpuValue.REMAPPED_ROWS_PENDING, 1),
            (GpuValue.REMAPPED_ROWS_FAILURE, 1),
            (GpuValue.RETIRED_PAGES_SINGLE_BIT, 3),
            (GpuValue.RETIRED_PAGES_DOUBLE_BIT, 1),
            (GpuValue.RETIRED_PAGES_PENDING, 1),
        )
    )
    with machine_file(lib, tmp_path, records):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        assert nvml.nvmlDeviceGetEccMode(handle) == [1, 0]
        assert ecc_counts(nvml, handle) == {
            (CORRECTED, VOLATILE): 11,
            (CORRECTED, AGGREGATE): 40,
            (UNCORRECTED, VOLATILE): 2,
            (UNCORRECTED, AGGREGATE): 2**64 - 1,
        }
        assert nvml.nvmlDeviceGetRemappedRows(handle) == (5, 2**32 - 1, 1, 1)
        single = nvml.nvmlDeviceGetRetiredPages(handle, SINGLE_BIT)
        double = nvml.nvmlDeviceGetRetiredPages_v2(handle, DOUBLE_BIT)
        assert len(single) == 3 and len(double) == 1
        addresses = [*single, *(page["address"] for page in double)]
        assert len(set(addresses)) == 4 and all(a % 4096 == 0 for a in addresses)
        assert [p["address"] for p in nvml.nvmlDeviceGetRetiredPages_v2(handle, 0)] == single
        times = [p["timestamp"] for p in nvml.nvmlDeviceGetRetiredPages_v2(handle, SINGLE_BIT)]
        assert times == sorted(times) and len(set(times)) == 3
        assert nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == 1
        nvml.nvmlShutdown()


def test_ecc_counts_need_ecc_enabled(nvml: ModuleType, lib: ctypes.CDLL, tmp_path: Path) -> None:
    records = "value ecc_current 0\nvalue ecc_pending 1\nvalue ecc_volatile_uncorrected 4\n"
    with machine_file(lib, tmp_path, records):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        # ECC is off until the reboot that turns it on; the counts wait for it too.
        assert nvml.nvmlDeviceGetEccMode(handle) == [0, 1]
        with nvml_fails(NOT_SUPPORTED):
            nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE)
        nvml.nvmlShutdown()


def test_retired_pages_two_call_protocol_and_bad_arguments(
    lib: ctypes.CDLL, tmp_path: Path
) -> None:
    with machine_file(lib, tmp_path, "value retired_pages_single_bit 3\n"):
        assert lib.nvmlInitWithFlags(0) == 0
        handle = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
        count = ctypes.c_uint(0)
        pages = (ctypes.c_ulonglong * 8)()
        stamps = (ctypes.c_ulonglong * 8)()
        get = lib.nvmlDeviceGetRetiredPages_v2
        assert get(handle, SINGLE_BIT, ctypes.byref(count), None, None) == 7  # INSUFFICIENT_SIZE
        assert count.value == 3
        count.value = 2
        assert get(handle, SINGLE_BIT, ctypes.byref(count), pages, stamps) == 7
        assert count.value == 3
        count.value = 8
        assert get(handle, SINGLE_BIT, ctypes.byref(count), None, stamps) == 2  # no buffer
        assert get(handle, SINGLE_BIT, ctypes.byref(count), pages, None) == 2
        assert get(handle, SINGLE_BIT, None, pages, stamps) == 2
        assert get(handle, 2, ctypes.byref(count), pages, stamps) == 2  # no such cause
        assert get(handle, SINGLE_BIT, ctypes.byref(count), pages, stamps) == 0
        assert count.value == 3 and len({pages[i] for i in range(3)}) == 3
        # The double-bit count is absent from this machine: NOT_SUPPORTED.
        assert get(handle, DOUBLE_BIT, ctypes.byref(count), pages, stamps) == NOT_SUPPORTED
        assert lib.nvmlShutdown() == 0


#: A GPU in MIG mode that has every health value (all 0).
MIG_GPU_RECORDS = "mig_mode 1 1\n" + "".join(f"value {value} 0\n" for value in GpuValue)


@pytest.mark.parametrize("mig_devices", [0, 1])
def test_health_calls_refuse_bad_arguments_and_mig_handles(
    lib: ctypes.CDLL, tmp_path: Path, mig_devices: int
) -> None:
    records = MIG_GPU_RECORDS + "mig 0\nmig_instance 1 0\n" * mig_devices
    with machine_file(lib, tmp_path, records):
        assert lib.nvmlInitWithFlags(0) == 0
        handle = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
        state = ctypes.c_int()
        count = ctypes.c_ulonglong()
        rows = [ctypes.c_uint() for _ in range(4)]
        assert lib.nvmlDeviceGetEccMode(handle, ctypes.byref(state), None) == 2
        assert lib.nvmlDeviceGetTotalEccErrors(handle, 2, VOLATILE, ctypes.byref(count)) == 2
        assert lib.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, 2, ctypes.byref(count)) == 2
        assert lib.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE, None) == 2
        assert lib.nvmlDeviceGetRemappedRows(handle, *map(ctypes.byref, rows[:3]), None) == 2
        assert lib.nvmlDeviceGetRetiredPagesPendingStatus(handle, None) == 2
        # nvml.h: remapped rows are not reported on a GPU in MIG mode with MIG devices.
        refs = [ctypes.byref(r) for r in rows]
        assert lib.nvmlDeviceGetRemappedRows(handle, *refs) == (3 if mig_devices else 0)
        if mig_devices:
            mig = ctypes.c_void_p()
            assert lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0, ctypes.byref(mig)) == 0
            # Physical-GPU queries: NOT_SUPPORTED on a MIG device handle.
            assert lib.nvmlDeviceGetEccMode(mig, ctypes.byref(state), ctypes.byref(state)) == 3
        assert lib.nvmlShutdown() == 0


def test_health_calls_are_calls_on_their_gpu(nvml: ModuleType) -> None:
    lost = Faults(gpu_lost=(GpuLost(gpu=0, after_calls=3),))
    with simulate_raw(SimulationProfile(facts=realistic("dgx-h100"), faults=lost)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)  # call 1 on GPU 0
        assert nvml.nvmlDeviceGetEccMode(handle) == [1, 1]
        assert nvml.nvmlDeviceGetRemappedRows(handle) == (0, 0, 0, 0)
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE)
        nvml.nvmlShutdown()


def test_python_and_c_name_the_same_gpu_values() -> None:
    engine = (Path(library_path()).parent / "sim_faults.c").read_text()
    named_in_c = set(re.findall(r'\[SIM_VALUE_\w+\] = \{"(\w+)"', engine))
    assert named_in_c == {value.value for value in GpuValue}


@pytest.mark.parametrize(
    ("records", "problem"),
    [
        ("value ecc_colour 1\n", "line 4: value: 'ecc_colour' is not a GPU value"),
        ("value ecc_current 2\n", "line 4: value: '2' is not a value of ecc_current"),
        ("value remapped_rows_correctable 4294967296\n", "is not a value of remapped_rows"),
        ("value event_types 0x40\n", "'0x40' is not a value of event_types"),
        ("value ecc_current\n", "value: expected NAME N"),
        ("value ecc_current 1\nvalue ecc_current 0\n", "line 5: value: ecc_current is given twice"),
    ],
)
def test_the_library_refuses_bad_value_records(
    lib: ctypes.CDLL, tmp_path: Path, records: str, problem: str
) -> None:
    with pytest.raises(GfdError, match=problem), machine_file(lib, tmp_path, records):
        pass


def test_a_value_before_any_gpu_is_refused(lib: ctypes.CDLL, tmp_path: Path) -> None:
    path = tmp_path / "machine.conf"
    path.write_text("gfdsim-config 1\nvalue ecc_current 1\n")
    with pytest.raises(GfdError, match="line 2: 'value' comes before any 'gpu' line"):
        configure_library(lib, path)
    configure_library(lib, None)


# --------------------------------------------------------------------------- driver branches


@pytest.mark.parametrize("branch", EMULATED_BRANCHES)
def test_each_branch_library_exports_the_health_calls(branch: int, tmp_path: Path) -> None:
    """The simulated library of a branch has each health call exactly when the branch does."""
    copy = tmp_path / "libnvidia-ml.so.1"
    write_without_exports(library_path(), copy, hidden_in(branch))
    exported = dynamic_exports(copy)
    for call in HEALTH_CALLS:
        assert (call in exported) == exported_in(call, branch), f"branch {branch}: {call}"


@pytest.mark.oracle("nvml-exports")
def test_the_health_calls_are_exported_as_by_the_real_libraries(tmp_path: Path) -> None:
    listings = sorted(oracle_path("nvml-exports").glob("libnvidia-ml.so.*.txt"))
    assert listings, "no export list of a real library"
    for listing in listings:
        version = listing.name.removeprefix("libnvidia-ml.so.").removesuffix(".txt")
        real = set(listing.read_text().split())
        copy = tmp_path / f"{version}.so"
        write_without_exports(library_path(), copy, hidden_in(driver_branch(version)))
        simulated = dynamic_exports(copy)
        differ = sorted(call for call in HEALTH_CALLS if (call in real) != (call in simulated))
        assert not differ, f"{version}: the simulated and the real library differ on {differ}"
