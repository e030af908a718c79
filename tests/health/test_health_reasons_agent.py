"""Issue 33's reasons end to end: a simulated machine, the periodic agent with the node sink,
the condition and the taint on its Node in the API server emulator, on a clock of the test's.

Each fault turns the ``GPUHealthy`` condition and the taint ``nvidia.com/gpu.health`` to its
reason (``FabricNotReady``, ``FabricDegraded``, ``NVLinkDegraded``, ``XidStorm``, and
``XidError`` from the kernel log), with one Event, and both clear when the fault clears: the
simulator re-configured without it (tests/sim_swap.py), a later fault entry bringing the
fabric back, or the hold passing. The agent is assembled as gfd/app assembles it
(``HealthMonitor`` with the watcher, or its join with a kernel log, in ``EventRules``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gfd.agent import Agent
from gfd.base.logs import get_logger
from gfd.config.values import XidThreshold
from gfd.facts import NodeFacts
from gfd.health import CONDITION_TYPE, EventRules, HealthMonitor, HealthReporter
from gfd.health.condition import EVENT_NAMESPACE, NodeConditionWriter, node_reader
from gfd.health.taint import TAINT_KEY, HealthOutputs, NodeTaintWriter
from gfd.health.xid_catalog import action_label
from gfd.kube_api import KubeClient
from gfd.labels import LabelOptions
from gfd.metrics import AgentTelemetry
from gfd.nvml.kernel_xids import KernelLog
from gfd.nvml.reader import NvmlReader
from gfd.nvml.xid_events import XidSource, XidWatcher
from gfd.nvml.xid_feed import XidFeed
from gfd.sim import SimulatedMachine, SimulationProfile, simulate
from gfd.sim.faults import (
    CriticalXid,
    FabricChange,
    Faults,
    GpuVanished,
    NvLinkDown,
    XidStorm,
)
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator
from tests.health.doubles import Clock
from tests.health.test_xid_memory_agent import DUE_AFTER, address, make_due, profile, until
from tests.kube_fixtures import NODE
from tests.sim_swap import serve

PROFILE = "dgx-h100"
HOLD = 600.0
STORM = XidThreshold(frozenset({13, 31, 43}), 10, 300.0)


@dataclasses.dataclass
class Node:
    machine: SimulatedMachine
    agent: Agent
    telemetry: AgentTelemetry
    clock: Clock
    emulator: ApiServerEmulator
    facts: NodeFacts

    def condition(self) -> tuple[str, str, str]:
        found = self.emulator.node_condition(NODE, CONDITION_TYPE)
        assert found is not None
        return found["status"], found["reason"], found["message"]

    def taints(self) -> list[dict[str, str]]:
        return list(self.emulator.node(NODE)["spec"].get("taints") or [])

    def events(self) -> list[str]:
        return [e["reason"] for e in self.emulator.events(EVENT_NAMESPACE)]

    def xids(self, gpu: int, xid: int) -> float | None:
        return self.telemetry.registry.get_sample_value(
            "gfd_gpu_xid_errors_total",
            {"gpu": str(gpu), "xid": str(xid), "action": action_label(xid)},
        )

    def problems(self, check: str) -> float | None:
        return self.telemetry.registry.get_sample_value(
            "gfd_health_check_problems", {"check": check}
        )

    def assert_unhealthy(self, reason: str) -> str:
        status, found, message = self.condition()
        assert (status, found) == ("False", reason)
        assert self.taints() == [{"key": TAINT_KEY, "value": reason, "effect": "NoSchedule"}]
        return message

    def assert_healthy(self) -> None:
        status, reason, _ = self.condition()
        assert (status, reason) == ("True", "GPUsHealthy")
        assert self.taints() == []


@contextmanager
def gfd_on(
    simulated: SimulationProfile,
    client: KubeClient,
    stop: threading.Event,
    emulator: ApiServerEmulator,
    *,
    grace_period: float = 300.0,
    thresholds: tuple[XidThreshold, ...] = (),
    kernel_log: Path | None = None,
) -> Iterator[Node]:
    """``gfd --patch-node --health-taint --health-event-hold 10m`` (and the given grace
    period, storm rules and kernel log) on a clock of the test's."""
    emulator.set_node_status(
        NODE,
        allocatable={"cpu": "224", "nvidia.com/gpu": str(len(simulated.facts.gpus))},
        conditions=[{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    )
    with simulate(simulated) as machine:
        telemetry = AgentTelemetry(sleep_interval=60)
        watcher = XidWatcher(library_path=machine.library_path, on_event=telemetry.xid_error)
        reader = NvmlReader(
            library_path=machine.library_path,
            sysfs_root=machine.sysfs_root,
            machine_type_file=machine.machine_type_file,
            # As gfd/app starts it: with the reader's session, before the read.
            on_session_start=watcher.start_holding_lock,
        )
        source: XidSource = watcher
        kernel = None
        if kernel_log is not None:
            kernel = KernelLog(kernel_log)
            source = XidFeed(watcher, kernel, on_event=telemetry.xid_error)
        clock = Clock()
        sink = NodeSink(client=client, node_name=NODE, stop=stop)
        monitor = HealthMonitor(
            sysfs_root=machine.sysfs_root,
            clock=clock,
            grace_period=grace_period,
            log=get_logger(),
            events=EventRules(xid_events=source, hold=HOLD, thresholds=thresholds),
        )
        health = HealthReporter(
            monitor,
            log=get_logger(),
            read_node=node_reader(sink),
            writer=HealthOutputs(
                [
                    NodeConditionWriter(client=client, node_sink=sink, stop=stop),
                    NodeTaintWriter(client=client, node_sink=sink, stop=stop, effect="NoSchedule"),
                ]
            ),
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
            yield Node(machine, agent, telemetry, clock, emulator, simulated.facts)
        finally:
            watcher.close()
            reader.close()
            if kernel is not None:
                kernel.close()


def test_a_fabric_that_never_registers_then_comes_up(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    stuck = Faults(fabric=(FabricChange(gpu=1, after_calls=0, state="in-progress"),))
    with gfd_on(profile(faults=stuck), client, stop, emulator) as node:
        # Inside the grace period nothing is decided: no condition is written yet.
        assert node.agent.cycle().ok
        assert emulator.node_condition(NODE, CONDITION_TYPE) is None
        assert node.problems("fabric") == 1
        node.clock.now += 300
        assert node.agent.cycle().ok
        message = node.assert_unhealthy("FabricNotReady")
        assert message.startswith(f"{address(PROFILE, 1)}: NVLink fabric registration in-progress")
        assert node.events() == ["FabricNotReady", "HealthTaintAdded"]
        # The fabric manager came up: the fault is gone from the machine.
        serve(node.machine, node.facts, tmp_path)
        assert node.agent.cycle().ok
        node.assert_healthy()
        assert node.events()[-2:] == ["GPUsHealthy", "HealthTaintRemoved"]


def test_a_degraded_fabric_and_its_recovery(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    # Degraded bandwidth (nvml.h: DEGRADED_BW TRUE = 1) from the start, healthy again later.
    degraded = Faults(
        fabric=(
            FabricChange(gpu=6, after_calls=0, health_mask=1),
            FabricChange(gpu=6, after_calls=DUE_AFTER, health_mask=0),
        )
    )
    with gfd_on(profile(faults=degraded), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        message = node.assert_unhealthy("FabricDegraded")
        assert message == (
            f"{address(PROFILE, 6)}: NVLink fabric health: bandwidth degraded (health mask 0x1)"
        )
        make_due(6)
        assert node.agent.cycle().ok
        node.assert_healthy()


def test_links_down_from_the_start_then_back(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    down = Faults(nvlink_down=(NvLinkDown(gpu=3, after_calls=0, links=(4, 11)),))
    with gfd_on(profile(faults=down), client, stop, emulator) as node:
        assert node.agent.cycle().ok
        message = node.assert_unhealthy("NVLinkDegraded")
        assert message == (
            f"{address(PROFILE, 3)}: 16 of 18 NVLinks active (NVLinks 4, 11 down): "
            "H100 SXM5 GPUs have 18"
        )
        serve(node.machine, node.facts, tmp_path)
        assert node.agent.cycle().ok
        node.assert_healthy()


def test_an_xid_storm_from_nvml_is_held_then_clears(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator
) -> None:
    storm = Faults(xid_storm=(XidStorm(gpu=2, xid=13, after_calls=DUE_AFTER, count=10),))
    with gfd_on(profile(faults=storm), client, stop, emulator, thresholds=(STORM,)) as node:
        assert node.agent.cycle().ok
        node.assert_healthy()
        make_due(2)
        until(lambda: node.xids(2, 13) == 10)
        assert node.agent.cycle().ok
        message = node.assert_unhealthy("XidStorm")
        assert message.startswith(
            f"{address(PROFILE, 2)}: Xid storm, 10 of Xid 13 (at least 10 within 5m), first "
        )
        assert node.events()[-2:] == ["XidStorm", "HealthTaintAdded"]
        # Held as a fatal Xid is: until the hold has passed without another.
        node.clock.now += HOLD - 1
        assert node.agent.cycle().ok
        node.assert_unhealthy("XidStorm")
        node.clock.now += 1
        assert node.agent.cycle().ok
        node.assert_healthy()


def kmsg_record(sequence: int, seconds_ago: float, text: str) -> str:
    return f"3,{sequence},{int((time.monotonic() - seconds_ago) * 1e6)},-;{text}\n"


def xid_line(bus: str, xid: int) -> str:
    return f"NVRM: Xid (PCI:{bus}): {xid}, pid='<unknown>', name=<unknown>, details"


def test_an_xid_logged_before_gfd_started_and_a_later_one_both_report_are_counted_once(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    """The kernel logged an Xid 79 on GPU 3 two minutes before gfd started: the first cycle
    reports it. A second Xid 79 comes while gfd runs: NVML delivers it and the kernel logs
    it; it counts once (2 times in all, not 3)."""
    log = tmp_path / "kmsg"
    bus = address(PROFILE, 3).split("(")[1].rstrip(")")[:-2]  # 0000:61:00
    log.write_text(
        kmsg_record(1, 1.0e4, "Linux version 6.8.0") + kmsg_record(2, 120.0, xid_line(bus, 79))
    )
    xid_79 = Faults(xid=(CriticalXid(gpu=3, xid=79, after_calls=DUE_AFTER),))
    with gfd_on(profile(faults=xid_79), client, stop, emulator, kernel_log=log) as node:
        assert node.agent.cycle().ok
        message = node.assert_unhealthy("XidError")
        assert message.startswith(
            f"{address(PROFILE, 3)}: Xid 79 (GPU has fallen off the bus), 1 time, first "
        )
        make_due(3)
        until(lambda: node.xids(3, 79) == 2)
        with log.open("a") as kernel:
            kernel.write(kmsg_record(3, 0.0, xid_line(bus, 79)))
        assert node.agent.cycle().ok
        _, _, message = node.condition()
        assert message.startswith(
            f"{address(PROFILE, 3)}: Xid 79 (GPU has fallen off the bus), 2 times, first "
        )
        assert node.xids(3, 79) == 2
        # Held from when each happened: the hold runs from the second.
        node.clock.now += HOLD
        assert node.agent.cycle().ok
        node.assert_healthy()


def test_an_xid_79_of_a_gpu_gone_from_nvml_is_named_by_its_address(
    client: KubeClient, stop: threading.Event, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    """The GPU fell off the bus before gfd started: NVML does not list it, the kernel
    logged its Xid 79. The xid check names it by the bus id the kernel gave."""
    log = tmp_path / "kmsg"
    log.write_text(kmsg_record(1, 60.0, xid_line("0000:df:00", 79)))
    # GPU 7 (0000:df:00.0) is not enumerated from the start, and stays on the PCI bus.
    gone = Faults(gpu_vanished=(GpuVanished(gpu=7, after_calls=0),))
    with gfd_on(profile(faults=gone), client, stop, emulator, kernel_log=log) as node:
        assert node.agent.cycle().ok
        status, reason, message = node.condition()
        # gpu-lost sees it too (on the PCI bus, not in NVML) and ranks first.
        assert (status, reason) == ("False", "GPULost")
        assert "the GPU at 0000:df:00.0: Xid 79 (GPU has fallen off the bus), 1 time" in message
        assert (
            node.telemetry.registry.get_sample_value(
                "gfd_gpu_xid_errors_total",
                {"gpu": "00000000:DF:00.0", "xid": "79", "action": "restart_bm"},
            )
            == 1
        )
