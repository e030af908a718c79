"""The reported state (gfd.health.reporter): decided at once on a problem, held while nothing
is decided, adopted from the Node on a restart, and handed to the writer and the label."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gfd.base.errors import NvmlError
from gfd.health import (
    DEVICE_PLUGIN,
    GPU_LOST,
    HEALTH_LABEL,
    NVLINK,
    HealthMonitor,
    HealthReporter,
    HealthState,
    Transition,
)
from tests.factories import make_facts, make_gpu
from tests.health.doubles import BRIDGED_CARD, EIGHT, Clock, Log, links, node, sysfs_for


class Writer:
    """Records what the reporter hands on, and serves a Node."""

    def __init__(self, node_body: dict[str, Any] | None = None) -> None:
        self.node_body = node_body
        self.writes: list[tuple[HealthState, Transition | None]] = []

    def read(self) -> dict[str, Any] | None:
        return self.node_body

    def saw(self, node: Any) -> None:
        return None

    def write(self, state: HealthState, transition: Transition | None) -> None:
        self.writes.append((state, transition))


def reporter(
    tmp_path: Path, clock: Clock, writer: Writer | None = None, **kwargs: Any
) -> HealthReporter:
    monitor = HealthMonitor(
        sysfs_root=sysfs_for(tmp_path, 8),
        checks=[GPU_LOST, DEVICE_PLUGIN, NVLINK],
        grace_period=300,
        clock=clock,
    )
    return HealthReporter(
        monitor,
        log=Log(),
        read_node=writer.read if writer else None,
        writer=writer,
        **kwargs,
    )


def test_a_problem_decides_at_once_and_its_end_restores_health(tmp_path: Path) -> None:
    writer = Writer(node({"nvidia.com/gpu": "8"}))
    health = reporter(tmp_path, Clock(), writer, label=True)
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}
    health.report()
    seven = make_facts([make_gpu(i) for i in range(7)])
    assert health.observe(seven) == {HEALTH_LABEL: "GPULost"}
    health.report()
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}
    health.report()
    health.observe(EIGHT)
    health.report()
    states = [(w[0].status, w[0].reason) for w in writer.writes]
    assert states == [
        ("True", "GPUsHealthy"),
        ("False", "GPULost"),
        ("True", "GPUsHealthy"),
        ("True", "GPUsHealthy"),
    ]
    # Events: none for the first healthy state, one per change, none in a steady state.
    transitions = [w[1] for w in writer.writes]
    assert transitions[0] is None and transitions[3] is None
    assert transitions[1] is not None and transitions[1].state.reason == "GPULost"
    assert transitions[2] is not None and transitions[2].previous == writer.writes[1][0]
    assert writer.writes[1][0].message == (
        "GPU 7 (0000:22:00.0) is on the PCI bus but NVML does not see it"
    )


def test_a_failed_read_holds_the_state_and_a_pending_problem_holds_it_too(
    tmp_path: Path,
) -> None:
    clock = Clock()
    writer = Writer(node({"nvidia.com/gpu": "8"}))
    health = reporter(tmp_path, clock, writer, label=True)
    health.observe(make_facts([make_gpu(i) for i in range(7)]))
    assert health.state is not None and health.state.reason == "GPULost"
    # NVML down: nothing decided, the GPULost state stays.
    error = NvmlError("nvmlInit", 9, "NVML_ERROR_DRIVER_NOT_LOADED")
    assert health.observe(None, error) == {HEALTH_LABEL: "GPULost"}
    # The GPU is back but the device plugin has not caught up: still held.
    writer.node_body = node({})
    assert health.observe(EIGHT) == {HEALTH_LABEL: "GPULost"}
    writer.node_body = node({"nvidia.com/gpu": "8"})
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}


def test_a_restart_adopts_the_condition_left_on_the_node(tmp_path: Path) -> None:
    clock = Clock()
    left = {
        "type": "GPUHealthy",
        "status": "False",
        "reason": "DevicePluginMissing",
        "message": "the kubelet does not advertise nvidia.com/gpu (expected 8): "
        "the device plugin is not registered",
    }
    writer = Writer(node({}, conditions=[left]))
    health = reporter(tmp_path, clock, writer, label=True)
    # Inside the grace period of the new process: the node stays as it was.
    assert health.observe(EIGHT) == {HEALTH_LABEL: "DevicePluginMissing"}
    health.report()
    assert writer.writes[0][1] is None
    clock.now += 300
    health.observe(EIGHT)
    health.report()
    # The same problem, confirmed: no transition, so no Event.
    assert writer.writes[-1][1] is None


def test_without_a_writer_the_state_still_reaches_the_label(tmp_path: Path) -> None:
    health = reporter(tmp_path, Clock(), None, label=True)
    assert health.observe(EIGHT) == {HEALTH_LABEL: "healthy"}
    assert health.observe(make_facts([make_gpu(i) for i in range(7)])) == {HEALTH_LABEL: "GPULost"}


def test_the_label_is_off_unless_asked_for(tmp_path: Path) -> None:
    assert reporter(tmp_path, Clock()).observe(EIGHT) == {}


def test_problems_are_ordered_by_reason_and_the_message_is_bounded(tmp_path: Path) -> None:
    clock = Clock()
    writer = Writer(node({"nvidia.com/gpu": "3"}))
    health = reporter(tmp_path, clock, writer)
    gpus = [make_gpu(i, name=BRIDGED_CARD, nvlinks=links(True, True)) for i in range(8)]
    health.observe(make_facts(gpus))
    degraded = [dataclasses.replace(g, nvlinks=links(True, False)) for g in gpus[:7]]
    health.observe(make_facts(degraded))
    clock.now += 300
    health.observe(make_facts(degraded))
    state = health.state
    assert state is not None and not state.healthy
    assert state.reason == "GPULost"
    parts = state.message.split("; ")
    assert parts[0].startswith("GPU 7 (0000:22:00.0) is on the PCI bus")
    assert parts[1].startswith("the kubelet advertises 3 nvidia.com/gpu, expected 7")
    assert parts[2] == "GPU 0 (0000:1b:00.0): NVLink 1 down (active earlier)"
    assert state.failing_checks == {GPU_LOST, DEVICE_PLUGIN, NVLINK}
    assert len(state.message) <= 1024
