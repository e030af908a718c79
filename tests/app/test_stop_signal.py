"""SIGTERM ends any run promptly: mid-cycle, in a one-shot run, inside a call that never returns.

A stop that arrives while a cycle reads or computes ends that cycle at once (nothing of it
was published); one that arrives while the main thread is held inside a call into C (NVML
on a hung driver, simulated by a ``delays`` fault) is carried out by the stop watchdog. How
long a stop takes is measured by ``bench/absurd_input.py``; these tests only wait for the
process with a generous timeout.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gfd.agent import Agent, LoopControl, StopRequested
from gfd.app.signals import StopWatchdog
from gfd.facts import NodeFacts, dump_facts
from gfd.labels import LabelOptions
from gfd.sim import (
    CallDelay,
    Faults,
    SimulationProfile,
    configure_library,
    load_profile,
    prepare_machine,
)
from gfd.sim.faults import faults_to_dict
from gfd.sinks import Publication
from tests.factories import make_facts
from tests.reliability.agent_process import running_gfd

#: Generous: a stop takes well under a second; a loaded CI machine must not fail the test.
EXIT_TIMEOUT = 10


def test_a_stop_signal_ends_interruptible_work_once() -> None:
    control = LoopControl()
    with pytest.raises(StopRequested), control.interruptible():
        control.stop_from_signal()
        pytest.fail("the work went on after the stop signal")
    assert control.stop_requested
    # Outside interruptible work a stop signal only asks; work asked to stop never starts.
    control.stop_from_signal()
    with pytest.raises(StopRequested), control.interruptible():
        pytest.fail("interruptible work started after a stop")


def test_a_second_signal_does_not_interrupt_the_unwinding() -> None:
    control = LoopControl()
    with pytest.raises(StopRequested), control.interruptible():
        try:
            control.stop_from_signal()
        finally:
            control.stop_from_signal()  # cleanup code hit by a second SIGTERM


class RecordingSink:
    name = "recording"

    def __init__(self) -> None:
        self.published: list[Publication] = []

    def publish(self, publication: Publication) -> bool:
        self.published.append(publication)
        return True

    def close(self) -> None:
        return None


class Log:
    def __getattr__(self, _level: str) -> object:
        return lambda *_args, **_fields: None


def test_a_stop_during_the_read_ends_the_cycle_and_publishes_nothing() -> None:
    control = LoopControl()
    sink = RecordingSink()

    def read() -> NodeFacts:
        control.stop_from_signal()  # as the handler does when SIGTERM comes mid-read
        return make_facts()

    agent = Agent(
        read_facts=read,
        sinks=[sink],
        options=LabelOptions(),
        log=Log(),
        interruptible=control.interruptible,
    )
    with pytest.raises(StopRequested):
        agent.cycle()
    assert sink.published == []


def test_the_watchdog_ends_a_main_thread_held_in_a_call_into_c(tmp_path: Path) -> None:
    """SIGTERM while this thread sleeps inside the simulator: the watchdog acts at once."""
    # 3 s: the sender's 0.2 s, then the watchdog's 0.05 s grace and its threads, all while
    # the call runs, with room for a busy machine to be slow to schedule them.
    delayed = Faults(delays=(CallDelay(call="nvmlSystemGetDriverVersion", seconds=3.0),))
    machine = prepare_machine(
        SimulationProfile(facts=load_profile("t4-single").facts, faults=delayed), tmp_path
    )
    library = ctypes.CDLL(str(machine.library_path))
    configure_library(library, machine.config_path)
    control = LoopControl()
    exits: list[tuple[int, bool]] = []
    in_c_call = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: control.request_stop())
    watchdog = StopWatchdog(
        control, grace=0.05, exit_now=lambda code: exits.append((code, in_c_call.is_set()))
    )
    try:

        def send_sigterm() -> None:
            in_c_call.wait(5)
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGTERM)

        sender = threading.Thread(target=send_sigterm)
        sender.start()
        buffer = ctypes.create_string_buffer(80)
        assert library.nvmlInitWithFlags(0) == 0
        in_c_call.set()
        assert library.nvmlSystemGetDriverVersion(buffer, 80) == 0
        in_c_call.clear()
        sender.join()
        assert library.nvmlShutdown() == 0
    finally:
        watchdog.close()
        signal.signal(signal.SIGTERM, previous)
        configure_library(library, None)
    # It exited (here: recorded) with status 0 while the call was still running.
    assert exits == [(0, True)]
    assert control.stop.is_set()


def test_the_stop_handler_takes_no_lock() -> None:
    """A handler runs between two bytecodes of the main thread, which may be inside
    Event.wait holding the event's lock: a handler that set the event there waited for its
    own thread forever, and the watchdog behind it (an agent that ignored SIGTERM)."""
    control = LoopControl()
    done = threading.Event()

    def handler() -> None:
        control.stop_from_signal()
        done.set()

    with control.wake._cond, control.stop._cond:  # held, as inside Event.wait
        threading.Thread(target=handler, daemon=True).start()
        assert done.wait(30), "the stop handler waited for a lock"
    assert control.stop_requested
    with pytest.raises(StopRequested), control.interruptible():
        pytest.fail("interruptible work started after a stop signal")


def test_the_watchdog_carries_a_stop_and_a_reload_to_the_loop() -> None:
    """The handlers set no event: the watchdog's thread, woken by the same signal, does."""
    control = LoopControl()
    watchdog = StopWatchdog(control, grace=30, exit_now=lambda _status: None)
    previous = signal.signal(signal.SIGHUP, lambda *_: None)
    try:
        signal.raise_signal(signal.SIGHUP)
        assert control.wake.wait(30) and control.reload_requested
        control.wake.clear()
        handlers = signal.signal(signal.SIGTERM, lambda *_: control.stop_from_signal())
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            signal.signal(signal.SIGTERM, handlers)
        # request_stop sets stop, then wake, on its own thread: wait for each.
        assert control.stop.wait(30) and control.wake.wait(30)
    finally:
        signal.signal(signal.SIGHUP, previous)
        # A stop came: its countdown ends in the no-op exit above, 30 s on.
        watchdog.close()


def test_the_watchdog_stands_down_when_the_run_ends_in_time() -> None:
    control = LoopControl()
    exits: list[int] = []
    watchdog = StopWatchdog(control, grace=5, exit_now=exits.append)
    watchdog.close()
    assert exits == []


def test_a_stop_the_main_thread_saw_first_is_still_counted_down_after_close() -> None:
    """The signal handler ran, the loop ended and the run closed the watchdog before its
    thread read the signal's byte: what follows the close (the interpreter's exit) is
    still held to the grace, not left to hang."""
    control = LoopControl()
    exits: list[int] = []
    watchdog = StopWatchdog(control, grace=0.2, exit_now=exits.append)
    control.stop_from_signal()  # the main thread's handler; this thread saw no byte yet
    watchdog.close()
    deadline = time.monotonic() + 30
    while not exits and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exits == [0]


# --------------------------------------------------------------------------- #
# The gfd process


def slow_profile(tmp_path: Path, base: str, delay: CallDelay) -> Path:
    import yaml

    path = tmp_path / f"{base}-slow.yaml"
    faults = {"faults": {"delays": faults_to_dict(Faults(delays=(delay,)))["delays"]}}
    path.write_text(dump_facts(load_profile(base).facts) + yaml.safe_dump(faults))
    return path


def in_nanosleep(pid: int) -> bool:
    """Whether the process's main thread sleeps in the kernel (the simulator's delay)."""
    try:
        return "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def stop_when_slow(process: subprocess.Popen[str]) -> tuple[int, str, bool]:
    """SIGTERM once the process sleeps in a delayed NVML call; (exit code, stderr, whether
    the call was seen). Where /proc shows no wait channel, after a few seconds anyway."""
    deadline = time.monotonic() + 20
    seen = False
    while time.monotonic() < deadline and process.poll() is None:
        if in_nanosleep(process.pid):
            seen = True
            break
        time.sleep(0.05)
    else:
        time.sleep(3)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=EXIT_TIMEOUT)
    return process.returncode, stderr, seen


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["--oneshot"], ["--sleep-interval", "60s"]])
def test_sigterm_ends_a_run_held_in_an_nvml_call_that_never_returns(
    mode: list[str], tmp_path: Path
) -> None:
    hung = CallDelay(call="nvmlDeviceGetName", seconds=600)
    output = tmp_path / "gfd"
    profile = slow_profile(tmp_path, "t4-single", hung)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    with running_gfd("--simulate", str(profile), "-o", str(output), *mode, env=env) as process:
        code, stderr, seen = stop_when_slow(process)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert not output.exists(), "nothing of an interrupted cycle is published"
    if seen:
        assert "stopping now: still busy" in stderr
    # The watchdog's exit runs no finally block: it removes the simulated machine itself
    # (the sysfs tree, the machine file, the 535 branch's library copy).
    assert sorted(temporary.iterdir()) == []


@pytest.mark.slow
def test_sigterm_ends_a_slow_cycle_between_two_calls(tmp_path: Path) -> None:
    # 28 pairs of GPUs, each pair's call 0.3 s: a cycle of over 8 s.
    slow = CallDelay(call="nvmlDeviceGetTopologyCommonAncestor", seconds=0.3)
    output = tmp_path / "gfd"
    profile = slow_profile(tmp_path, "dgx-h100", slow)
    with running_gfd(
        "--simulate", str(profile), "-o", str(output), "--sleep-interval", "60s"
    ) as process:
        code, stderr, _ = stop_when_slow(process)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert not output.exists()
