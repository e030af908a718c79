"""NVML events through the simulator: event sets, registration, waiting, and the ``xid`` fault.

A watcher thread waits in ``nvmlEventSetWait_v2`` while the main thread reads, as gfd's Xid
watcher does: the wait must not hold the library's lock, must return the Xid that the
main thread's calls make due, and must time out when nothing comes. As in NVML, a set
sees only events that happen while it records their type on that GPU.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pynvml
import pytest

from gfd.facts import NodeFacts
from gfd.sim import SimulationProfile, configure_library, load_profile
from gfd.sim.faults import CallError, CriticalXid, Faults, GpuLost
from tests.sim import simulate_raw, without_memory_health

from .test_sim_faults import with_faults
from .test_sim_health import realistic
from .test_sim_nvml import nvml_fails

XID = pynvml.nvmlEventTypeXidCriticalError
NO_INSTANCE = 0xFFFFFFFF
#: Long enough that a wait that does not end by itself fails the test clearly.
PATIENCE_MS = 10_000


class Waiter:
    """A thread that makes one ``nvmlEventSetWait_v2`` and keeps its answer."""

    def __init__(self, nvml: ModuleType, event_set: Any, timeout_ms: int = PATIENCE_MS) -> None:
        self.result: Any = None
        self.error: int | None = None
        self.thread = threading.Thread(target=self._wait, args=(nvml, event_set, timeout_ms))
        self.thread.start()

    def _wait(self, nvml: ModuleType, event_set: Any, timeout_ms: int) -> None:
        try:
            self.result = nvml.nvmlEventSetWait_v2(event_set, timeout_ms)
        except pynvml.NVMLError as exc:
            self.error = exc.value

    def join(self) -> None:
        self.thread.join(PATIENCE_MS / 1000 + 5)
        assert not self.thread.is_alive(), "the wait did not end"


def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) for another thread to reach a state."""
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the other thread"
        time.sleep(0.01)


def xid_faults(*xids: CriticalXid) -> Faults:
    return Faults(xid=xids)


# --------------------------------------------------------------------------- sets


@pytest.mark.parametrize(
    ("facts", "mask"),
    [
        (realistic("dgx-a100"), 0xFF9F),  # every type, as a real H200 answers
        (realistic("dgx1-v100"), 0xFF9F),
        (realistic("rtx4090x8"), 0xC19C),  # no ECC: no memory-error events
        (without_memory_health(load_profile("dgx-a100").facts), 0xC19C),  # no memory health
    ],
)
def test_supported_event_types(nvml: ModuleType, facts: NodeFacts, mask: int) -> None:
    with simulate_raw(facts):
        nvml.nvmlInit()
        assert nvml.nvmlDeviceGetSupportedEventTypes(nvml.nvmlDeviceGetHandleByIndex(0)) == mask
        nvml.nvmlShutdown()


def test_registration_refuses_what_the_gpu_lacks_and_bad_arguments(
    nvml: ModuleType, lib: ctypes.CDLL
) -> None:
    with simulate_raw("rtx4090x8"):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        event_set = nvml.nvmlEventSetCreate()
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceRegisterEvents(
                handle, XID | pynvml.nvmlEventTypeDoubleBitEccError, event_set
            )
        # As a real driver answered (H200, 580.159.04): no type, and an unknown low bit,
        # succeed and record nothing; a bit above the low 32 is NOT_SUPPORTED.
        for types in (0, 0x40):
            nvml.nvmlDeviceRegisterEvents(handle, types, event_set)
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceRegisterEvents(handle, 1 << 40, event_set)
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceRegisterEvents(handle, XID, None)
        nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        nvml.nvmlEventSetFree(event_set)
        # A freed set is a stale handle.
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlEventSetFree(event_set)
        assert lib.nvmlEventSetCreate(None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        nvml.nvmlShutdown()
        with nvml_fails(pynvml.NVML_ERROR_UNINITIALIZED):
            nvml.nvmlEventSetCreate()


def test_mig_device_handles_cannot_register(nvml: ModuleType) -> None:
    with simulate_raw("dgx-a100-mig-single"):
        nvml.nvmlInit()
        gpu = nvml.nvmlDeviceGetHandleByIndex(0)
        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        event_set = nvml.nvmlEventSetCreate()
        with nvml_fails(pynvml.NVML_ERROR_NOT_SUPPORTED):
            nvml.nvmlDeviceRegisterEvents(mig, XID, event_set)
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_event_sets_are_bounded_and_freed_with_nvml(nvml: ModuleType) -> None:
    with simulate_raw("t4-single"):
        nvml.nvmlInit()
        # A real driver held at least 65 at once.
        sets = [nvml.nvmlEventSetCreate() for _ in range(128)]
        with nvml_fails(pynvml.NVML_ERROR_UNKNOWN):
            nvml.nvmlEventSetCreate()
        nvml.nvmlEventSetFree(sets.pop())
        sets.append(nvml.nvmlEventSetCreate())
        # The last nvmlShutdown takes NVML's state with it, the event sets included.
        nvml.nvmlShutdown()
        nvml.nvmlInit()
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlEventSetWait_v2(sets[0], 0)
        fresh = [nvml.nvmlEventSetCreate() for _ in range(128)]
        for event_set in fresh:
            nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


# --------------------------------------------------------------------------- waiting


def test_a_wait_times_out_when_nothing_comes(nvml: ModuleType) -> None:
    with simulate_raw("t4-single"):
        nvml.nvmlInit()
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(0), XID, event_set)
        started = time.monotonic()
        with nvml_fails(pynvml.NVML_ERROR_TIMEOUT):
            nvml.nvmlEventSetWait_v2(event_set, 200)
        assert 0.2 <= time.monotonic() - started < 5
        with nvml_fails(pynvml.NVML_ERROR_TIMEOUT):
            nvml.nvmlEventSetWait_v2(event_set, 0)
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_an_xid_reaches_a_thread_waiting_while_the_main_thread_reads(nvml: ModuleType) -> None:
    # Calls on GPU 1 before the watcher waits: the handle (1), registration (2); the Xid
    # happens with call 6, the fourth of the main thread's reads below.
    faults = xid_faults(CriticalXid(gpu=1, xid=79, after_calls=5))
    with simulate_raw(with_faults("dgx-a100", faults)):
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        event_set = nvml.nvmlEventSetCreate()
        for handle in handles:
            nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        waiter = Waiter(nvml, event_set)
        started = time.monotonic()
        for _ in range(10):
            # While the watcher waits, the main thread's calls go on: the lock is free.
            for handle in handles:
                nvml.nvmlDeviceGetName(handle)
        assert time.monotonic() - started < 2
        waiter.join()
        assert waiter.error is None
        event = waiter.result
        assert (event.eventType, event.eventData) == (XID, 79)
        assert nvml.nvmlDeviceGetIndex(event.device) == 1
        assert (event.gpuInstanceId, event.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
        # One Xid, delivered once.
        with nvml_fails(pynvml.NVML_ERROR_TIMEOUT):
            nvml.nvmlEventSetWait_v2(event_set, 0)
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_an_event_before_registration_is_not_recorded(nvml: ModuleType) -> None:
    # Due from the first call on GPU 0, which is the lookup of its handle.
    with simulate_raw(with_faults("t4-single", xid_faults(CriticalXid(0, 48, after_calls=0)))):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        nvml.nvmlDeviceGetName(handle)
        with nvml_fails(pynvml.NVML_ERROR_TIMEOUT):
            nvml.nvmlEventSetWait_v2(event_set, 0)
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_only_sets_recording_the_type_on_that_gpu_receive_it(nvml: ModuleType) -> None:
    faults = xid_faults(CriticalXid(gpu=2, xid=94, after_calls=3, times=3))
    with simulate_raw(SimulationProfile(facts=realistic("dgx1-v100"), faults=faults)):
        nvml.nvmlInit()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        on_gpu_2, on_gpu_1, ecc_only = (nvml.nvmlEventSetCreate() for _ in range(3))
        nvml.nvmlDeviceRegisterEvents(handles[2], XID, on_gpu_2)
        nvml.nvmlDeviceRegisterEvents(handles[1], XID, on_gpu_1)
        nvml.nvmlDeviceRegisterEvents(handles[2], pynvml.nvmlEventTypeDoubleBitEccError, ecc_only)
        nvml.nvmlDeviceGetName(handles[2])  # call 4 on GPU 2: the Xids happen
        assert [nvml.nvmlEventSetWait_v2(on_gpu_2, 0).eventData for _ in range(3)] == [94] * 3
        for event_set in (on_gpu_2, on_gpu_1, ecc_only):
            with nvml_fails(pynvml.NVML_ERROR_TIMEOUT):
                nvml.nvmlEventSetWait_v2(event_set, 0)
            nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_an_xid_on_a_mig_device_names_its_instances(nvml: ModuleType) -> None:
    faults = xid_faults(CriticalXid(gpu=0, xid=43, after_calls=2, mig=3))
    with simulate_raw(with_faults("dgx-a100-mig-single", faults)):
        nvml.nvmlInit()
        gpu = nvml.nvmlDeviceGetHandleByIndex(0)
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(gpu, XID, event_set)
        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 3)
        event = nvml.nvmlEventSetWait_v2(event_set, 0)
        assert event.eventData == 43 and nvml.nvmlDeviceGetIndex(event.device) == 0
        assert event.gpuInstanceId == nvml.nvmlDeviceGetGpuInstanceId(mig)
        assert event.computeInstanceId == nvml.nvmlDeviceGetComputeInstanceId(mig)
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


class OlderEventData(ctypes.Structure):
    """``nvmlEventData_t`` before MIG (device, eventType, eventData), then a guard word."""

    _fields_ = [
        ("device", ctypes.c_void_p),
        ("eventType", ctypes.c_ulonglong),
        ("eventData", ctypes.c_ulonglong),
        ("guard", ctypes.c_ulonglong),
    ]


def test_the_older_wait_fills_only_the_older_struct(lib: ctypes.CDLL) -> None:
    faults = xid_faults(CriticalXid(gpu=0, xid=31, after_calls=2))
    with simulate_raw(with_faults("t4-single", faults)):
        assert lib.nvmlInitWithFlags(0) == 0
        handle = ctypes.c_void_p()
        event_set = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
        assert lib.nvmlEventSetCreate(ctypes.byref(event_set)) == 0
        assert lib.nvmlDeviceRegisterEvents(handle, ctypes.c_ulonglong(XID), event_set) == 0
        index = ctypes.c_uint()
        assert lib.nvmlDeviceGetIndex(handle, ctypes.byref(index)) == 0  # call 3: the Xid
        data = OlderEventData(guard=0x5A5A5A5A5A5A5A5A)
        assert lib.nvmlEventSetWait(event_set, ctypes.byref(data), 0) == 0
        assert (data.device, data.eventType, data.eventData) == (handle.value, XID, 31)
        assert data.guard == 0x5A5A5A5A5A5A5A5A
        assert lib.nvmlEventSetWait(event_set, None, 0) == pynvml.NVML_ERROR_INVALID_ARGUMENT
        assert lib.nvmlEventSetFree(event_set) == 0
        assert lib.nvmlShutdown() == 0


def test_a_wait_on_a_lost_gpu_returns_gpu_is_lost(nvml: ModuleType) -> None:
    faults = Faults(
        gpu_lost=(GpuLost(gpu=1, after_calls=3),),
        xid=(CriticalXid(gpu=1, xid=79, after_calls=3),),
    )
    with simulate_raw(with_faults("pcie-l4x4", faults)):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(1)
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        waiter = Waiter(nvml, event_set)
        nvml.nvmlDeviceGetName(handle)  # call 3: the last one answered
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlDeviceGetName(handle)  # the Xid 79 happens as the GPU falls off
        waiter.join()
        assert waiter.error is None and waiter.result.eventData == 79
        # Nothing queued any more: the wait says the GPU is gone, at once.
        started = time.monotonic()
        with nvml_fails(pynvml.NVML_ERROR_GPU_IS_LOST):
            nvml.nvmlEventSetWait_v2(event_set, PATIENCE_MS)
        assert time.monotonic() - started < 2
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_a_wait_outlives_its_freed_set_and_ends_with_nvml(nvml: ModuleType) -> None:
    with simulate_raw("t4-single"):
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        # Freed while a thread waits on it: on a real driver (H200, 580.159.04) the wait
        # ran out its 3 s and answered TIMEOUT; so here. A wait that only starts after the
        # free names a stale set (INVALID_ARGUMENT): then try again, giving it longer.
        answers = []
        for head_start in (0.1, 0.5, 2.0):
            started = time.monotonic()
            waiter = Waiter(nvml, event_set, timeout_ms=1000)
            time.sleep(head_start)
            nvml.nvmlEventSetFree(event_set)
            waiter.join()
            answers.append((waiter.error, time.monotonic() - started >= 1))
            if waiter.error != pynvml.NVML_ERROR_INVALID_ARGUMENT:
                break
            event_set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        assert answers[-1] == (pynvml.NVML_ERROR_TIMEOUT, True), answers
        # The last nvmlShutdown ends a wait at once.
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(handle, XID, event_set)
        waiter = Waiter(nvml, event_set)
        time.sleep(0.1)
        started = time.monotonic()
        nvml.nvmlShutdown()
        waiter.join()
        assert waiter.error == pynvml.NVML_ERROR_UNINITIALIZED
        assert time.monotonic() - started < PATIENCE_MS / 1000


def test_a_failing_wait_through_the_errors_fault(nvml: ModuleType) -> None:
    faults = Faults(errors=(CallError(call="nvmlEventSetWait_v2", code=999, times=1),))
    with simulate_raw(with_faults("t4-single", faults)):
        nvml.nvmlInit()
        event_set = nvml.nvmlEventSetCreate()
        nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(0), XID, event_set)
        with nvml_fails(pynvml.NVML_ERROR_UNKNOWN):
            nvml.nvmlEventSetWait_v2(event_set, PATIENCE_MS)
        with nvml_fails(pynvml.NVML_ERROR_TIMEOUT):
            nvml.nvmlEventSetWait_v2(event_set, 0)
        nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()


def test_a_new_machine_frees_the_old_sets(nvml: ModuleType, lib: ctypes.CDLL) -> None:
    with simulate_raw("t4-single") as machine:
        nvml.nvmlInit()
        event_set = nvml.nvmlEventSetCreate()
        configure_library(lib, machine.config_path)  # the same machine, loaded anew
        with nvml_fails(pynvml.NVML_ERROR_INVALID_ARGUMENT):
            nvml.nvmlEventSetFree(event_set)
        nvml.nvmlShutdown()
