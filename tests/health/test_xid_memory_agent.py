"""Xid errors and memory health end to end: a simulated DGX H100 whose GPUs report what a
real driver does (ECC on, remapped rows), the Xid watcher, the agent, and its Node in the
emulator; the assembly of gfd/app (the watcher's life); and a gfd process loading NVML
from a driver root, stopped by SIGTERM while its watcher waits.

A fault happens "after the first cycle": it is due after more calls on its GPU than the
first cycle makes, and the test makes those calls itself between two cycles (as a
driver's Xid comes between two of gfd's cycles), then waits for the watcher to receive
the Xid. So the cycle after it is the one that must report it, with no race on when the
watcher's thread runs.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gfd.agent import Agent
from gfd.app.health_setup import HealthSetup
from gfd.app.node_reader import NodeReader
from gfd.app.sinks import SinkSet
from gfd.base.errors import NvmlGpuLost
from gfd.base.logs import get_logger
from gfd.config import Settings
from gfd.health import CONDITION_TYPE, EventRules, HealthMonitor, HealthReporter
from gfd.health.condition import EVENT_NAMESPACE, ConditionWriter, NodeConditionWriter, node_reader
from gfd.health.taint import TAINT_KEY, HealthOutputs, NodeTaintWriter
from gfd.health.xid_catalog import action_label
from gfd.kube_api import KubeClient
from gfd.labels import LabelOptions
from gfd.metrics import AgentTelemetry
from gfd.nvml.driver_root import NVML_LIBRARY, this_architecture
from gfd.nvml.reader import NvmlReader
from gfd.nvml.xid_events import XidWatcher
from gfd.nvml.xid_feed import XidFeed
from gfd.sim import (
    CONFIG_ENV,
    SimulatedMachine,
    SimulationProfile,
    library_path,
    load_profile,
    prepare_machine,
    simulate,
    with_default_memory_health,
)
from gfd.sim.faults import NO_FAULTS, CriticalXid, EccRising, Faults, GpuLost, RowRemapping
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator
from tests.health.doubles import Clock
from tests.kube_fixtures import NODE
from tests.reliability.agent_process import environment as agent_environment
from tests.reliability.agent_process import gfd_command

PROFILE = "dgx-h100"
#: Far more calls on one GPU than a first cycle makes (about 85 on a DGX H100).
DUE_AFTER = 900
HOLD = 600.0


def profile(name: str = PROFILE, faults: Faults = NO_FAULTS) -> SimulationProfile:
    loaded = load_profile(name)
    return dataclasses.replace(
        loaded, facts=with_default_memory_health(loaded.facts), faults=faults
    )


def address(name: str, index: int) -> str:
    """GPU ``index`` of profile ``name`` as messages name it: ``GPU 3 (0000:61:00.0)``."""
    bus_id = load_profile(name).facts.gpus[index].bus_id
    return f"GPU {index} (0000:{bus_id.split(':', 1)[1].lower()})"


def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def make_due(gpu: int, calls: int = DUE_AFTER + 100) -> None:
    """Calls on GPU ``gpu`` from the test, past every fault's ``DUE_AFTER``."""
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        for _ in range(calls):
            pynvml.nvmlDeviceGetName(handle)
    finally:
        pynvml.nvmlShutdown()


@dataclasses.dataclass
class Node:
    """One simulated node and gfd's agent on it, in the test's hands."""

    machine: SimulatedMachine
    agent: Agent
    watcher: XidWatcher
    telemetry: AgentTelemetry
    clock: Clock
    emulator: ApiServerEmulator

    def condition(self) -> dict[str, Any]:
        found = self.emulator.node_condition(NODE, CONDITION_TYPE)
        assert found is not None
        return found

    def events(self) -> list[tuple[str, str]]:
        return [(e["reason"], e["type"]) for e in self.emulator.events(EVENT_NAMESPACE)]

    def xids(self, gpu: int, xid: int) -> float | None:
        return self.telemetry.registry.get_sample_value(
            "gfd_gpu_xid_errors_total",
            {"gpu": str(gpu), "xid": str(xid), "action": action_label(xid)},
        )

    def gauge(self, name: str, check: str) -> float | None:
        return self.telemetry.registry.get_sample_value(name, {"check": check})

    def xid_arrives(self, gpu: int, xid: int) -> None:
        make_due(gpu)
        until(lambda: self.xids(gpu, xid) == 1)

    def taints(self) -> list[dict[str, str]]:
        return list(self.emulator.node(NODE)["spec"].get("taints") or [])


@contextmanager
def gfd_on(
    simulated: SimulationProfile,
    client: KubeClient,
    stop: threading.Event,
    emulator: ApiServerEmulator,
    *,
    taint: bool = False,
) -> Iterator[Node]:
    """The agent as gfd/app assembles it for ``gfd --patch-node --health-event-hold 10m``
    (with ``--health-taint`` if ``taint``), on a clock of the test's."""
    emulator.set_node_status(
        NODE,
        allocatable={"cpu": "224", "nvidia.com/gpu": str(len(simulated.facts.gpus))},
        conditions=[{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    )
    with simulate(simulated) as machine:
        telemetry = AgentTelemetry(sleep_interval=60)
        watcher = XidWatcher(library_path=machine.library_path, on_event=telemetry.xid_error)
        watcher.start()
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
        )
        clock = Clock()
        sink = NodeSink(client=client, node_name=NODE, stop=stop)
        writers: list[ConditionWriter] = [
            NodeConditionWriter(client=client, node_sink=sink, stop=stop)
        ]
        if taint:
            writers.append(
                NodeTaintWriter(client=client, node_sink=sink, stop=stop, effect="NoSchedule")
            )
        monitor = HealthMonitor(
            sysfs_root=machine.sysfs_root,
            clock=clock,
            log=get_logger(),
            events=EventRules(xid_events=watcher, hold=HOLD),
        )
        health = HealthReporter(
            monitor,
            log=get_logger(),
            read_node=node_reader(sink),
            writer=HealthOutputs(writers),
            telemetry=telemetry,
        )
        agent = Agent(
            read_facts=reader.read,
            sinks=[sink],
            options=LabelOptions(),
            log=get_logger(),
            telemetry=telemetry,
            health=health,
        )
        try:
            yield Node(machine, agent, watcher, telemetry, clock, emulator)
        finally:
            watcher.close()
            reader.close()


def test_an_xid_79_on_gpu_3_turns_the_condition_within_one_cycle_and_clears_by_the_rule(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    xid_79 = Faults(xid=(CriticalXid(gpu=3, xid=79, after_calls=DUE_AFTER),))
    with gfd_on(profile(faults=xid_79), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        healthy = node.condition()
        assert (healthy["status"], healthy["reason"]) == ("True", "GPUsHealthy")
        assert healthy["message"] == (
            "every GPU health check passes (gpu-lost, device-plugin, fabric, nvlink, xid, memory, pcie)"
        )
        # Steady and healthy, with every check on: no write, one read of the Node.
        emulator.clear_log()
        assert node.agent.cycle().ok
        assert emulator.count(writes=True) == 0
        assert emulator.count(method="GET") == 1

        node.xid_arrives(3, 79)
        assert node.agent.cycle().ok
        failing = node.condition()
        assert (failing["status"], failing["reason"]) == ("False", "XidError")
        assert failing["message"].startswith(
            f"{address(PROFILE, 3)}: Xid 79 (GPU has fallen off the bus), 1 time, first "
        )
        assert node.events() == [("XidError", "Warning")]
        assert node.xids(3, 79) == 1
        assert node.gauge("gfd_health_check_failing", "xid") == 1
        assert node.telemetry.registry.get_sample_value("gfd_gpu_healthy") == 0

        # Held: the same problem, no new write, until the hold has passed without an Xid.
        node.clock.now += HOLD - 1
        emulator.clear_log()
        assert node.agent.cycle().ok
        assert emulator.count(writes=True) == 0
        assert node.condition()["reason"] == "XidError"
        node.clock.now += 1
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        assert node.events() == [("XidError", "Warning"), ("GPUsHealthy", "Normal")]
        assert node.gauge("gfd_health_check_failing", "xid") == 0


def test_xid_13_an_applications_fault_changes_nothing_but_the_count(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    xid_13 = Faults(xid=(CriticalXid(gpu=3, xid=13, after_calls=DUE_AFTER),))
    with gfd_on(profile(faults=xid_13), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        node.xid_arrives(3, 13)
        emulator.clear_log()
        assert node.agent.cycle().ok
        assert node.condition()["reason"] == "GPUsHealthy"
        assert emulator.count(writes=True) == 0
        assert node.events() == []
        assert node.xids(3, 13) == 1


def test_with_the_taint_an_xid_taints_the_node_until_the_rule_clears_it(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    xid_79 = Faults(xid=(CriticalXid(gpu=3, xid=79, after_calls=DUE_AFTER),))
    with gfd_on(profile(faults=xid_79), client, stop, emulator, taint=True) as node:
        assert node.agent.cycle().ok
        assert node.taints() == []
        node.xid_arrives(3, 79)
        assert node.agent.cycle().ok
        assert node.taints() == [{"key": TAINT_KEY, "value": "XidError", "effect": "NoSchedule"}]
        node.clock.now += HOLD
        assert node.agent.cycle().ok
        assert node.taints() == []


def test_rows_pending_then_failed_on_gpu_1(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    rows = Faults(
        remapped_rows=(
            RowRemapping(gpu=1, after_calls=DUE_AFTER, pending=True),
            RowRemapping(gpu=1, after_calls=2 * DUE_AFTER, failure=True, uncorrectable=1),
        )
    )
    with gfd_on(profile(faults=rows), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        make_due(1)
        assert node.agent.cycle().ok
        pending = node.condition()
        assert (pending["status"], pending["reason"]) == ("False", "GPUResetRequired")
        assert pending["message"] == (
            f"{address(PROFILE, 1)}: a row remapping is pending: reset the GPU"
        )
        make_due(1)
        assert node.agent.cycle().ok
        failed = node.condition()
        assert failed["reason"] == "GPUMemoryFailure"
        assert failed["message"].startswith(f"{address(PROFILE, 1)}: row remapping failed (1 row ")
        assert node.events() == [("GPUResetRequired", "Warning"), ("GPUMemoryFailure", "Warning")]
        assert node.gauge("gfd_health_check_problems", "memory") == 2


def test_uncorrectable_ecc_errors_rising_on_gpu_2(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    rising = Faults(ecc_rising=(EccRising(gpu=2, after_calls=DUE_AFTER, per_call=1),))
    with gfd_on(profile(faults=rising), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        make_due(2)
        assert node.agent.cycle().ok
        ecc = node.condition()
        assert ecc["reason"] == "UncorrectableECC"
        assert ecc["message"].startswith(f"{address(PROFILE, 2)}: ")
        assert "new uncorrectable ECC errors (volatile count " in ecc["message"]


def test_gpus_without_ecc_leave_the_memory_check_unable_to_decide(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    with gfd_on(profile("rtx4090x8"), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        condition = node.condition()
        assert (condition["status"], condition["reason"]) == ("True", "GPUsHealthy")
        assert condition["message"] == (
            "every GPU health check passes (gpu-lost, device-plugin, fabric, nvlink, xid, pcie); "
            "cannot decide: memory"
        )
        assert node.gauge("gfd_health_check_cannot_decide", "memory") == 1
        assert node.gauge("gfd_health_check_failing", "memory") == 0
        assert node.gauge("gfd_health_check_cannot_decide", "xid") == 0


# --------------------------------------------------------------------------- #
# gfd/app: the watcher's life


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        return lambda event, **_fields: self.lines.append((level, event))


#: The xid check on NVML's events alone: no kernel log (the host's would be read otherwise).
NVML_ONLY = Settings(health_kernel_log=None)


def test_the_watcher_runs_with_the_xid_check_in_a_periodic_run_only() -> None:
    with simulate(profile()) as machine:
        read = NodeReader(
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            library_path=machine.library_path,
        )
        setup = HealthSetup(threading.Event())
        telemetry = AgentTelemetry(sleep_interval=60)
        log = Log()

        def watcher_of(settings: Settings) -> Any:
            reporter = setup.reporter(settings, SinkSet(sinks=[]), read, log, telemetry)
            assert reporter is not None
            return reporter.monitor.setup.events.xid_events

        try:
            running = watcher_of(NVML_ONLY)
            assert isinstance(running, XidWatcher)
            # Started by the check's first drain, after the cycle's read has asked NVML.
            assert not running.running
            assert running.drain() == ()
            assert running.running
            assert running.on_event == telemetry.xid_error
            # A reload that keeps the check keeps the watcher (and what it queued).
            assert watcher_of(replace(NVML_ONLY, health_event_hold=60.0)) is running
            # One that drops the check closes it.
            assert watcher_of(replace(NVML_ONLY, health_checks=("gpu-lost",))) is None
            assert not running.running
            # A one-shot run starts none.
            assert watcher_of(replace(NVML_ONLY, oneshot=True)) is None
            again = watcher_of(NVML_ONLY)
            assert again is not running
            again.drain()
            assert again.running
            setup.close()
            assert not again.running
        finally:
            setup.close()
    assert log.lines == []


def first_cycle_calls_on(gpu: int) -> int:
    """Calls the first cycle of the agent makes on ``gpu`` of :data:`PROFILE` (the watcher's
    registration and the reader's first read), counted by a fault that is never due: a
    GPU lost after N calls answers ``GPU_IS_LOST`` from call N+1 on, so the first N that
    lets the cycle pass is the count."""
    low, high = 1, 256
    while low < high:
        middle = (low + high) // 2
        lost = Faults(gpu_lost=(GpuLost(gpu=gpu, after_calls=middle),))
        with simulate(profile(faults=lost)) as machine:
            read = NodeReader(
                sysfs_root=machine.sysfs_root,
                machine_type_file=machine.machine_type_file,
                library_path=machine.library_path,
            )
            setup = HealthSetup(threading.Event())
            try:
                setup.reporter(
                    Settings(health_kernel_log=None), SinkSet(sinks=[]), read, Log(), None
                )
                try:
                    read()
                    passed = True
                except NvmlGpuLost:
                    passed = False
            finally:
                setup.close()
                read.close()
        low, high = (low, middle) if passed else (middle + 1, high)
    return low


@pytest.mark.parametrize("due_after", [60, 120])
def test_an_xid_due_during_the_first_cycles_read_is_reported(due_after: int) -> None:
    """The issue's case: an Xid 79 on GPU 3 at its 60th call came during the first cycle's
    read, before the watcher (then started after that read) had registered, and was never
    reported; at its 120th call (a later read) it was. The watcher now registers as the
    reader's NVML session starts, before the read asks any GPU: both are reported."""
    calls = first_cycle_calls_on(3)
    assert 60 <= calls < 120, f"the first cycle makes {calls} calls on GPU 3"
    xid_79 = Faults(xid=(CriticalXid(gpu=3, xid=79, after_calls=due_after),))
    with simulate(profile(faults=xid_79)) as machine:
        read = NodeReader(
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            library_path=machine.library_path,
        )
        setup = HealthSetup(threading.Event())
        telemetry = AgentTelemetry(sleep_interval=60)
        try:
            reporter = setup.reporter(
                Settings(health_label=True, health_kernel_log=None),
                SinkSet(sinks=[]),
                read,
                Log(),
                telemetry,
            )
            agent = Agent(
                read_facts=read,
                sinks=[],
                options=LabelOptions(),
                log=get_logger(),
                telemetry=telemetry,
                health=reporter,
            )

            def received() -> bool:
                count = telemetry.registry.get_sample_value(
                    "gfd_gpu_xid_errors_total", {"gpu": "3", "xid": "79", "action": "restart_bm"}
                )
                return count == 1

            cycles = 0
            while not received():
                assert cycles < 10, "the Xid never arrived"
                assert agent.cycle().ok
                cycles += 1
                if due_after < calls:
                    # Due during the first read: received after it, with no call since.
                    until(received)
            if due_after < calls:
                assert cycles == 1
            outcome = agent.cycle()
            assert outcome.labels["nvidia.com/gpu.health"] == "XidError"
        finally:
            setup.close()
            read.close()


@pytest.mark.slow
def test_a_run_under_a_driver_root_watches_xids_and_stops_within_a_second(
    tmp_path: Path,
) -> None:
    """A periodic gfd loading NVML from a driver root (as under the GPU Operator): its Xid
    watcher loads the same library as its reader (pynvml holds one per process), its Xid
    reaches the label, and SIGTERM ends the run within a second while the watcher waits
    (half a second at most)."""
    # Due a few cycles in: the watcher starts after the first cycle's read.
    xid_79 = Faults(xid=(CriticalXid(gpu=0, xid=79, after_calls=100),))
    machine = prepare_machine(profile("t4-single", xid_79), tmp_path / "machine")
    root = tmp_path / "driver-root"
    library = root / "usr" / "lib" / this_architecture().multiarch / NVML_LIBRARY
    library.parent.mkdir(parents=True)
    library.write_bytes(library_path().read_bytes())
    output = tmp_path / "features"
    process = subprocess.Popen(
        gfd_command(
            "--driver-root-ctr-path", str(root),
            "--sysfs-root", str(machine.sysfs_root),
            "--machine-type-file", str(machine.machine_type_file),
            "-o", str(output), "--health-label", "--sleep-interval", "1s",
        ),
        env=agent_environment({CONFIG_ENV: str(machine.config_path)}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until(
            lambda: output.exists() and "nvidia.com/gpu.health=XidError" in output.read_text(),
            seconds=20,
        )
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
        took = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert took < 1.0, f"stopped after {took:.2f}s"


def test_the_kernel_log_joins_the_watcher_and_one_that_cannot_be_read_is_said_once(
    tmp_path: Path,
) -> None:
    """gfd/app's assembly: with --health-kernel-log the xid check drains the watcher joined
    with the log, kept across reloads (each record is handed on once); a log that cannot be
    read is one log line, and the check goes on with NVML's events alone; a one-shot run
    reads the log alone."""
    log_file = tmp_path / "kmsg"
    log_file.write_text("")
    with simulate(profile()) as machine:
        read = NodeReader(
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            library_path=machine.library_path,
        )
        setup = HealthSetup(threading.Event())
        log = Log()

        def source_of(settings: Settings) -> Any:
            reporter = setup.reporter(settings, SinkSet(sinks=[]), read, log, None)
            assert reporter is not None
            return reporter.monitor.setup.events.xid_events

        try:
            with_log = Settings(health_kernel_log=str(log_file))
            feed = source_of(with_log)
            assert isinstance(feed, XidFeed) and isinstance(feed.events, XidWatcher)
            assert source_of(replace(with_log, health_event_hold=60.0)) is feed
            one_shot = source_of(replace(with_log, oneshot=True))
            assert isinstance(one_shot, XidFeed) and one_shot.events is None
            assert log.lines == []
            missing = Settings(health_kernel_log=str(tmp_path / "no-such-kmsg"))
            assert isinstance(source_of(missing), XidFeed)
            assert log.lines == [
                (
                    "info",
                    "kernel log not read: Xids come from NVML's events "
                    "alone, and those logged before gfd started are not seen",
                )
            ]
        finally:
            setup.close()
            read.close()
