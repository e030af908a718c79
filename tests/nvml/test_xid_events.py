"""The Xid watcher (gfd.nvml.xid_events.XidWatcher) against the simulator: it starts and
registers every GPU, hands over the Xids that arrive while the main thread goes on with
NVML, closes within one wait, and says what it cannot see (a GPU it could not register,
failing waits, a start that failed and is retried at the next drain)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pynvml
import pytest

from gfd.base.errors import NvmlNotReady
from gfd.nvml.reader import NvmlReader
from gfd.nvml.xid_events import DEFAULT_WAIT_MS, UnwatchedGpu, XidEvent, XidGpu, XidWatcher
from gfd.sim import SimulatedMachine, SimulationProfile, load_profile, simulate
from gfd.sim.faults import NO_FAULTS, CallError, CriticalXid, Faults

PROFILE = "dgx-h100"
FACTS = load_profile(PROFILE).facts
#: Calls the watcher makes on each GPU as it starts: handle, UUID, PCI info, registration.
START_CALLS = 4


def gpu(index: int) -> XidGpu:
    return XidGpu(index=index, bus_id=FACTS.gpus[index].bus_id, uuid=FACTS.gpus[index].uuid)


def profile(faults: Faults = NO_FAULTS) -> SimulationProfile:
    return dataclasses.replace(load_profile(PROFILE), faults=faults)


def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    """Wait (bounded) for the watcher's thread to reach a state."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the watcher's thread"
        time.sleep(0.005)


class Clock:
    def __init__(self) -> None:
        self.now = 1_796_000_000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def watching(
    machine: SimulatedMachine,
    *,
    wait_ms: int = 50,
    clock: Callable[[], float] = time.time,
    on_event: Callable[[XidEvent], None] | None = None,
    max_pending: int = 4096,
) -> Iterator[XidWatcher]:
    """A watcher of ``machine``, closed at the end; short waits keep the tests quick."""
    watcher = XidWatcher(
        library_path=machine.library_path,
        wait_ms=wait_ms,
        clock=clock,
        on_event=on_event,
        max_pending=max_pending,
    )
    try:
        yield watcher
    finally:
        watcher.close()


def touch(index: int, calls: int = 1) -> None:
    """Calls on GPU ``index`` from the main thread, which make an Xid fault due."""
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for _ in range(calls):
            pynvml.nvmlDeviceGetName(handle)
    finally:
        pynvml.nvmlShutdown()


def drained_until(watcher: XidWatcher, count: int) -> tuple[XidEvent, ...]:
    events: list[XidEvent] = []

    def enough() -> bool:
        events.extend(watcher.drain())
        return len(events) >= count

    until(enough)
    return tuple(events)


def test_an_xid_on_a_gpu_is_handed_over_with_the_gpu_and_the_time() -> None:
    faults = Faults(xid=(CriticalXid(gpu=3, xid=79, after_calls=START_CALLS + 1),))
    clock = Clock()
    heard: list[XidEvent] = []
    with (
        simulate(profile(faults)) as machine,
        watching(machine, clock=clock, on_event=heard.append) as watcher,
    ):
        watcher.start()
        assert (watcher.start_error, watcher.unwatched, watcher.wait_error) == (None, (), None)
        assert watcher.watched == tuple(gpu(i) for i in range(8))
        assert watcher.drain() == ()
        touch(3, calls=2)
        (event,) = drained_until(watcher, 1)
        assert event == XidEvent(gpu=gpu(3), xid=79, at=clock.now, gpu_instance=None)
        # The event is queued, then handed to the listener: a drain may come between.
        until(lambda: heard == [event])
        # Delivered once.
        time.sleep(0.05)
        assert watcher.drain() == ()


def test_closing_ends_the_wait_within_one_wait_length() -> None:
    with simulate(profile()) as machine:
        watcher = XidWatcher(library_path=machine.library_path)
        watcher.start()
        # Let the thread settle into a wait of its full length.
        time.sleep(0.05)
        started = time.monotonic()
        watcher.close()
        took = time.monotonic() - started
        assert not watcher.running
        assert watcher.start_error == "closed"
        assert took < DEFAULT_WAIT_MS / 1000 + 0.2
        # A closed watcher does not start again at a drain.
        assert watcher.drain() == ()
        assert not watcher.running


def test_a_gpu_that_cannot_be_registered_is_listed_and_the_others_are_watched() -> None:
    faults = Faults(
        errors=(
            CallError(call="nvmlDeviceRegisterEvents", code=pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=5),
        ),
        xid=(CriticalXid(gpu=2, xid=48, after_calls=START_CALLS + 1),),
    )
    with simulate(profile(faults)) as machine, watching(machine) as watcher:
        watcher.start()
        assert watcher.unwatched == (UnwatchedGpu(gpu(5), "NVML_ERROR_NOT_SUPPORTED"),)
        assert [watched.index for watched in watcher.watched] == [0, 1, 2, 3, 4, 6, 7]
        touch(2)
        (event,) = drained_until(watcher, 1)
        assert (event.gpu, event.xid) == (gpu(2), 48)


def test_failing_waits_are_said_until_a_wait_works_again() -> None:
    faults = Faults(
        errors=(CallError(call="nvmlEventSetWait_v2", code=pynvml.NVML_ERROR_UNKNOWN, times=3),)
    )
    with simulate(profile(faults)) as machine, watching(machine, wait_ms=20) as watcher:
        seen: list[str | None] = []

        def failed_then_recovered() -> bool:
            seen.append(watcher.wait_error)
            return "NVML_ERROR_UNKNOWN" in seen and seen[-1] is None

        watcher.start()
        until(failed_then_recovered)
        assert watcher.running


def test_a_start_that_fails_is_said_and_tried_again_at_the_next_drain() -> None:
    with (
        simulate(profile(Faults(driver_not_loaded_inits=1))) as machine,
        watching(machine) as watcher,
    ):
        with pytest.raises(NvmlNotReady, match="NVML_ERROR_DRIVER_NOT_LOADED"):
            watcher.start()
        assert not watcher.running
        assert watcher.start_error is not None
        assert "NVML_ERROR_DRIVER_NOT_LOADED" in watcher.start_error
        # Told not to start (NVML known down), it does not.
        assert watcher.drain(start=False) == ()
        assert not watcher.running
        assert watcher.drain() == ()
        assert watcher.running
        assert watcher.start_error is None


def test_the_watcher_outlives_the_readers_sessions() -> None:
    """The reader shuts NVML down and starts it again; the watcher's own reference keeps
    its event set and handles valid (NVML counts its initialisations)."""
    faults = Faults(xid=(CriticalXid(gpu=0, xid=94, after_calls=200),))
    with simulate(profile(faults)) as machine, watching(machine) as watcher:
        watcher.start()
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        try:
            for _ in range(4):
                reader.read()
                reader.close()
        finally:
            reader.close()
        (event,) = drained_until(watcher, 1)
        assert (event.gpu, event.xid) == (gpu(0), 94)
        assert watcher.wait_error is None


def test_an_xid_storm_keeps_the_newest_and_counts_the_dropped() -> None:
    faults = Faults(xid=(CriticalXid(gpu=1, xid=31, after_calls=START_CALLS + 1, times=5),))
    with simulate(profile(faults)) as machine, watching(machine, max_pending=3) as watcher:
        watcher.start()
        heard: list[XidEvent] = []
        watcher.on_event = heard.append
        touch(1)
        until(lambda: len(heard) == 5)
        assert len(watcher.drain()) == 3
        assert watcher.dropped == 2


def test_an_xid_on_a_mig_device_names_its_gpu_instance() -> None:
    mig = load_profile("dgx-a100-mig-mixed")
    device = next(device for device in mig.facts.gpus[0].mig_devices if device.index == 1)
    faults = Faults(xid=(CriticalXid(gpu=0, xid=43, after_calls=START_CALLS + 1, mig=1),))
    with simulate(dataclasses.replace(mig, faults=faults)) as machine, watching(machine) as watcher:
        watcher.start()
        touch(0)
        (event,) = drained_until(watcher, 1)
        assert event.gpu.index == 0
        assert event.gpu_instance == device.gpu_instance_id


@pytest.mark.parametrize("value", [0, -5])
def test_a_wait_or_queue_of_nothing_is_refused(value: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        XidWatcher(wait_ms=value)
    with pytest.raises(ValueError, match="at least 1"):
        XidWatcher(max_pending=value)
