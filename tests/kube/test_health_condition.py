"""GPU health end to end: a simulated machine, the agent, and its Node in the emulator.

The simulator serves a DGX H100 (8 GPUs); a GPU is lost by re-configuring it under
the agent's open NVML session, while the machine's sysfs tree still holds that GPU's
PCI device, as on a node where a GPU fell off the bus. Expected messages name the GPU
by the profile's own index and bus id.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd.agent import Agent
from gfd.base.logs import get_logger
from gfd.health import CONDITION_TYPE, HealthMonitor, HealthReporter
from gfd.health.condition import EVENT_NAMESPACE, NodeConditionWriter, node_reader
from gfd.kube_api import KubeClient
from gfd.labels import LabelOptions
from gfd.metrics import AgentTelemetry
from gfd.nvml.reader import NvmlReader
from gfd.sim import SimulatedMachine, load_profile, simulate
from gfd.sim.faults import Faults, GpuLost, GpuVanished, NvLinkDown
from gfd.sinks.featurefile import FeatureFileSink
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator
from tests.kube_fixtures import NODE
from tests.sim_swap import serve, without_last_gpu

PROFILE = "dgx-h100"
FACTS = load_profile(PROFILE).facts
LAST = len(FACTS.gpus) - 1
#: The last GPU as the sysfs tree and messages name it.
LOST_ADDRESS = "0000:" + FACTS.gpus[LAST].bus_id.split(":", 1)[1].lower()


@pytest.fixture
def machine() -> Iterator[SimulatedMachine]:
    with simulate(PROFILE) as simulated:
        yield simulated


@pytest.fixture
def reader(machine: SimulatedMachine) -> Iterator[NvmlReader]:
    nvml = NvmlReader(
        library_path=machine.library_path,
        sysfs_root=machine.sysfs_root,
        machine_type_file=machine.machine_type_file,
    )
    yield nvml
    nvml.close()


@pytest.fixture
def telemetry() -> AgentTelemetry:
    return AgentTelemetry(sleep_interval=60)


@pytest.fixture
def agent(
    machine: SimulatedMachine,
    reader: NvmlReader,
    client: KubeClient,
    stop: threading.Event,
    emulator: ApiServerEmulator,
    telemetry: AgentTelemetry,
) -> Agent:
    emulator.set_node_status(
        NODE,
        allocatable={"cpu": "224", "nvidia.com/gpu": "8"},
        conditions=[{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    )
    sink = NodeSink(client=client, node_name=NODE, stop=stop)
    health = HealthReporter(
        HealthMonitor(sysfs_root=machine.sysfs_root, grace_period=300, log=get_logger()),
        log=get_logger(),
        label=True,
        read_node=node_reader(sink),
        writer=NodeConditionWriter(client=client, node_sink=sink, stop=stop),
        telemetry=telemetry,
    )
    return Agent(
        read_facts=reader.read,
        sinks=[sink],
        options=LabelOptions(),
        log=get_logger(),
        telemetry=telemetry,
        health=health,
    )


def condition(emulator: ApiServerEmulator) -> dict[str, Any]:
    found = emulator.node_condition(NODE, CONDITION_TYPE)
    assert found is not None
    return found


def failing(telemetry: AgentTelemetry, check: str) -> float | None:
    return telemetry.registry.get_sample_value("gfd_health_check_failing", {"check": check})


def test_a_gpu_lost_after_the_first_cycle_turns_the_condition_and_back(
    agent: Agent,
    machine: SimulatedMachine,
    emulator: ApiServerEmulator,
    telemetry: AgentTelemetry,
    tmp_path: Path,
) -> None:
    assert agent.cycle().ok
    assert (condition(emulator)["status"], condition(emulator)["reason"]) == ("True", "GPUsHealthy")
    assert emulator.events(EVENT_NAMESPACE) == []
    assert emulator.node_labels(NODE)["nvidia.com/gpu.health"] == "healthy"

    serve(machine, without_last_gpu(FACTS), tmp_path)
    assert agent.cycle().ok
    lost = condition(emulator)
    assert (lost["status"], lost["reason"]) == ("False", "GPULost")
    assert (
        lost["message"] == f"GPU {LAST} ({LOST_ADDRESS}) is on the PCI bus but NVML does not see it"
    )
    events = emulator.events(EVENT_NAMESPACE)
    assert len(events) == 1
    event = events[0]
    assert (event["reason"], event["type"], event["message"]) == (
        "GPULost",
        "Warning",
        lost["message"],
    )
    node_uid = emulator.node(NODE)["metadata"]["uid"]
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": node_uid,
    }
    assert failing(telemetry, "gpu-lost") == 1
    assert telemetry.registry.get_sample_value("gfd_gpu_healthy") == 0
    assert emulator.node_labels(NODE)["nvidia.com/gpu.health"] == "GPULost"
    # The kubelet's condition is not gfd's: untouched.
    assert emulator.node_condition(NODE, "Ready") == {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
    }

    serve(machine, FACTS, tmp_path)
    assert agent.cycle().ok
    healthy = condition(emulator)
    assert (healthy["status"], healthy["reason"]) == ("True", "GPUsHealthy")
    assert healthy["lastTransitionTime"] >= lost["lastTransitionTime"]
    events = emulator.events(EVENT_NAMESPACE)
    assert [(e["reason"], e["type"]) for e in events] == [
        ("GPULost", "Warning"),
        ("GPUsHealthy", "Normal"),
    ]
    assert failing(telemetry, "gpu-lost") == 0

    emulator.clear_log()
    assert agent.cycle().ok
    assert emulator.count(writes=True) == 0
    assert emulator.count(method="GET") == 1


def test_a_gpu_that_answers_gpu_is_lost_keeps_the_labels_and_turns_the_condition(
    agent: Agent,
    machine: SimulatedMachine,
    emulator: ApiServerEmulator,
    telemetry: AgentTelemetry,
    tmp_path: Path,
) -> None:
    assert agent.cycle().ok
    labels = emulator.node_labels(NODE)
    serve(machine, FACTS, tmp_path, Faults(gpu_lost=(GpuLost(gpu=LAST, after_calls=0),)))
    outcome = agent.cycle()
    assert not outcome.ok and outcome.kind == "nvml-gpu-lost"
    lost = condition(emulator)
    assert (lost["status"], lost["reason"]) == ("False", "GPULost")
    assert (
        lost["message"]
        == f"GPU {LAST} ({LOST_ADDRESS}) is lost: NVML answers NVML_ERROR_GPU_IS_LOST"
    )
    assert len(emulator.events(EVENT_NAMESPACE)) == 1
    assert failing(telemetry, "gpu-lost") == 1
    # The last good labels stay: a read that failed publishes nothing.
    assert emulator.node_labels(NODE) == labels


def sysfs_address(index: int) -> str:
    return "0000:" + FACTS.gpus[index].bus_id.split(":", 1)[1].lower()


def test_a_gpu_vanishing_from_nvml_in_the_simulator_is_lost_by_its_old_index(
    agent: Agent, machine: SimulatedMachine, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    assert agent.cycle().ok
    # The simulator's own fault: GPU 3 is no longer enumerated, the GPUs after it move
    # down an index, its PCI device stays.
    serve(machine, FACTS, tmp_path, Faults(gpu_vanished=(GpuVanished(gpu=3, after_calls=0),)))
    assert agent.cycle().ok
    lost = condition(emulator)
    assert (lost["reason"], lost["message"]) == (
        "GPULost",
        f"GPU 3 ({sysfs_address(3)}) is on the PCI bus but NVML does not see it",
    )
    assert emulator.node_labels(NODE)["nvidia.com/gpu.count"] == "7"


def test_nvlinks_going_down_in_the_simulator_degrade_the_node(
    agent: Agent, machine: SimulatedMachine, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    assert agent.cycle().ok
    serve(
        machine,
        FACTS,
        tmp_path,
        Faults(nvlink_down=(NvLinkDown(gpu=2, after_calls=0, links=(4, 9)),)),
    )
    assert agent.cycle().ok
    degraded = condition(emulator)
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "False",
        "NVLinkDegraded",
        # Short of the 18 an H100 SXM has (the check's first rule, which also names links
        # that were up earlier).
        f"GPU 2 ({sysfs_address(2)}): 16 of 18 NVLinks active (NVLinks 4, 9 down): "
        "H100 SXM5 GPUs have 18",
    )
    assert [e["reason"] for e in emulator.events(EVENT_NAMESPACE)] == ["NVLinkDegraded"]
    serve(machine, FACTS, tmp_path)
    assert agent.cycle().ok
    assert condition(emulator)["status"] == "True"


def test_a_silent_device_plugin_is_reported_after_its_grace_period(
    machine: SimulatedMachine,
    reader: NvmlReader,
    client: KubeClient,
    stop: threading.Event,
    emulator: ApiServerEmulator,
) -> None:
    clock = [0.0]
    sink = NodeSink(client=client, node_name=NODE, stop=stop)
    health = HealthReporter(
        HealthMonitor(sysfs_root=machine.sysfs_root, grace_period=300, clock=lambda: clock[0]),
        log=get_logger(),
        read_node=node_reader(sink),
        writer=NodeConditionWriter(client=client, node_sink=sink, stop=stop),
    )
    agent = Agent(
        read_facts=reader.read,
        sinks=[sink],
        options=LabelOptions(),
        log=get_logger(),
        health=health,
    )
    assert agent.cycle().ok
    # Nothing decided yet (the plugin may be starting): no condition, no Event.
    assert emulator.node_condition(NODE, CONDITION_TYPE) is None
    clock[0] = 300
    assert agent.cycle().ok
    missing = condition(emulator)
    assert (missing["status"], missing["reason"]) == ("False", "DevicePluginMissing")
    assert missing["message"] == (
        "the kubelet does not advertise nvidia.com/gpu (expected 8): "
        "the device plugin is not registered"
    )
    # The plugin registers, with one device marked unhealthy: still a plugin problem,
    # one that has lasted the grace period already.
    emulator.set_node_status(NODE, allocatable={"nvidia.com/gpu": "7"})
    assert agent.cycle().ok
    short = condition(emulator)
    assert (short["reason"], short["lastTransitionTime"]) == (
        "AllocatableMismatch",
        missing["lastTransitionTime"],
    )
    assert [e["reason"] for e in emulator.events(EVENT_NAMESPACE)] == [
        "DevicePluginMissing",
        "AllocatableMismatch",
    ]


def test_with_the_feature_file_only_the_checks_run_without_any_api(
    machine: SimulatedMachine, reader: NvmlReader, tmp_path: Path, telemetry: AgentTelemetry
) -> None:
    lines: list[tuple[str, dict[str, Any]]] = []

    class Log:
        def warning(self, event: str, **fields: Any) -> None:
            lines.append((event, fields))

        def info(self, event: str, **fields: Any) -> None:
            lines.append((event, fields))

    output = tmp_path / "features.d" / "gfd"
    output.parent.mkdir()
    health = HealthReporter(
        HealthMonitor(sysfs_root=machine.sysfs_root),
        log=Log(),
        label=True,
        telemetry=telemetry,
    )
    agent = Agent(
        read_facts=reader.read,
        sinks=[FeatureFileSink(output)],
        options=LabelOptions(),
        log=get_logger(),
        telemetry=telemetry,
        health=health,
    )
    assert agent.cycle().ok
    serve(machine, without_last_gpu(FACTS), tmp_path)
    assert agent.cycle().ok
    assert "nvidia.com/gpu.health=GPULost\n" in output.read_text()
    assert failing(telemetry, "gpu-lost") == 1
    assert failing(telemetry, "nvlink") == 0
    # The device plugin check needs the Node: it does not run, and has no series.
    assert failing(telemetry, "device-plugin") is None
    assert lines[-1] == (
        "GPU health problem",
        {
            "reason": "GPULost",
            "message": f"GPU {LAST} ({LOST_ADDRESS}) is on the PCI bus but NVML does not see it",
            "was": "GPUsHealthy",
        },
    )
