"""GPU health on a real kube-apiserver, deploy/'s RBAC and admission policies installed.

gfd's agent runs in process on a simulated DGX H100 (the NVML simulator; its sysfs tree
keeps every GPU's PCI device), as the DaemonSet's ServiceAccount with a pod-bound token,
against a Node the kubelet would have filled (``allocatable``, its own ``Ready``
condition and node-problem-detector's). What the server stored, and how many requests
gfd made, come from the server itself and its audit log, not from gfd.
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
from gfd.sinks.node import NodeSink
from tests.realkube.cluster import GFD_USER, GfdCluster, GfdPod
from tests.sim_swap import serve, without_last_gpu

pytestmark = pytest.mark.oracle("kube")

FACTS = load_profile("dgx-h100").facts
LAST = len(FACTS.gpus) - 1
LOST_ADDRESS = "0000:" + FACTS.gpus[LAST].bus_id.split(":", 1)[1].lower()
#: Conditions other writers keep on the Node: the kubelet's and node-problem-detector's.
FOREIGN = [
    {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": "2026-12-01T00:00:00Z",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    },
    {
        "type": "KernelDeadlock",
        "status": "False",
        "reason": "KernelHasNoDeadlock",
        "message": "kernel has no deadlock",
        "lastHeartbeatTime": "2026-12-01T00:00:00Z",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    },
]


@pytest.fixture
def machine() -> Iterator[SimulatedMachine]:
    with simulate("dgx-h100") as simulated:
        yield simulated


@pytest.fixture
def client(kube: GfdCluster, pod: GfdPod) -> Iterator[KubeClient]:
    kube_client = kube.client(pod.kubeconfig)
    yield kube_client
    kube_client.close()


def kubelet_status(kube: GfdCluster, node: str) -> None:
    """What the kubelet (and node-problem-detector) would have put in the Node's status."""
    kube.admin.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {
            "status": {
                "capacity": {"cpu": "224", "nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "224", "nvidia.com/gpu": "8"},
                "conditions": FOREIGN,
            }
        },
        content_type="application/merge-patch+json",
    )


def conditions(kube: GfdCluster, node: str) -> dict[str, dict[str, Any]]:
    status = kube.admin.get(f"/api/v1/nodes/{node}")["status"]
    return {c["type"]: c for c in status.get("conditions", [])}


def node_events(kube: GfdCluster, node: str) -> list[dict[str, Any]]:
    listed = kube.admin.get(f"/api/v1/namespaces/{EVENT_NAMESPACE}/events")
    return [e for e in listed["items"] if e["involvedObject"].get("name") == node]


def writes(kube: GfdCluster, since: int) -> list[tuple[str, str, int]]:
    """(verb, resource[/subresource], status) of gfd's writes since ``since``."""
    found = []
    for event in kube.plane.audit.events(since, user=GFD_USER):
        if event["verb"] in ("get", "list", "watch"):
            continue
        ref = event.get("objectRef", {})
        resource = ref.get("resource", "") + (
            f"/{ref['subresource']}" if ref.get("subresource") else ""
        )
        found.append((event["verb"], resource, event["responseStatus"]["code"]))
    return found


def test_a_lost_gpu_turns_the_condition_records_one_event_and_recovers(
    kube: GfdCluster, node: str, client: KubeClient, machine: SimulatedMachine, tmp_path: Path
) -> None:
    kubelet_status(kube, node)
    reader = NvmlReader(
        library_path=machine.library_path,
        sysfs_root=machine.sysfs_root,
        machine_type_file=machine.machine_type_file,
    )
    stop = threading.Event()
    sink = NodeSink(client=client, node_name=node, stop=stop)
    telemetry = AgentTelemetry(sleep_interval=60)
    agent = Agent(
        read_facts=reader.read,
        sinks=[sink],
        options=LabelOptions(),
        log=get_logger(),
        telemetry=telemetry,
        health=HealthReporter(
            HealthMonitor(sysfs_root=machine.sysfs_root, grace_period=300),
            log=get_logger(),
            label=True,
            read_node=node_reader(sink),
            writer=NodeConditionWriter(client=client, node_sink=sink, stop=stop),
            telemetry=telemetry,
        ),
    )
    try:
        assert agent.cycle().ok
        assert conditions(kube, node)[CONDITION_TYPE]["status"] == "True"
        assert node_events(kube, node) == []

        serve(machine, without_last_gpu(FACTS), tmp_path)
        mark = kube.plane.audit.mark()
        outcome = agent.cycle()
        assert outcome.ok, outcome.reason
        found = conditions(kube, node)
        lost = found[CONDITION_TYPE]
        assert (lost["status"], lost["reason"], lost["message"]) == (
            "False",
            "GPULost",
            f"GPU {LAST} ({LOST_ADDRESS}) is on the PCI bus but NVML does not see it",
        )
        # Strategic merge by type: the kubelet's and node-problem-detector's stay as set.
        for foreign in FOREIGN:
            assert found[foreign["type"]] == foreign
        events = node_events(kube, node)
        assert [(e["reason"], e["type"], e["message"]) for e in events] == [
            ("GPULost", "Warning", lost["message"])
        ]
        assert events[0]["involvedObject"]["uid"] == kube.node_metadata(node)["uid"]
        assert (
            telemetry.registry.get_sample_value("gfd_health_check_failing", {"check": "gpu-lost"})
            == 1
        )
        assert sorted(writes(kube, mark)) == [
            ("create", "events", 201),
            ("patch", "nodes", 200),  # the labels: gpu.count and gpu.health changed
            ("patch", "nodes/status", 200),
        ]

        serve(machine, FACTS, tmp_path)
        assert agent.cycle().ok
        assert conditions(kube, node)[CONDITION_TYPE]["status"] == "True"
        assert [e["reason"] for e in node_events(kube, node)] == ["GPULost", "GPUsHealthy"]

        # Steady state: the one read of the node sink, nothing written.
        mark = kube.plane.audit.mark()
        assert agent.cycle().ok
        kube.plane.audit.settle()
        assert writes(kube, mark) == []
    finally:
        reader.close()
