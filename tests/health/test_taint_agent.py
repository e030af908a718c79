"""The health taint end to end: a simulated DGX H100, the agent, and its Node in the emulator.

In process, the agent is assembled as gfd/app assembles it with ``--health-taint`` (the
condition writer and the taint writer behind one :class:`HealthOutputs`); a GPU is lost
by re-configuring the simulator under the agent's open NVML session (tests/sim_swap.py).
As whole processes, ``gfd --health-taint`` runs with a profile whose GPU 3 is lost from
the start, then with the plain profile: the taint comes with the first run, goes with the
second, and no other taint moves.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd.agent import Agent
from gfd.base.logs import get_logger
from gfd.health import CONDITION_TYPE, HealthMonitor, HealthReporter
from gfd.health.condition import EVENT_NAMESPACE, NodeConditionWriter, node_reader
from gfd.health.taint import (
    TAINT_ADDED,
    TAINT_KEY,
    TAINT_OWNERSHIP_ANNOTATION,
    TAINT_REMOVED,
    HealthOutputs,
    NodeTaintWriter,
)
from gfd.kube_api import KubeClient
from gfd.labels import LabelOptions
from gfd.nvml.reader import NvmlReader
from gfd.sim import SimulatedMachine, load_profile, simulate
from gfd.sim.faults import Faults, GpuLost
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator
from tests.kube_fixtures import NODE
from tests.sim_swap import serve, without_last_gpu

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "dgx-h100"
FACTS = load_profile(PROFILE).facts
LAST = len(FACTS.gpus) - 1
#: Taints other writers keep on the node: gfd must leave every one as it is.
FOREIGN = [
    {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
]


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


def seed_node(emulator: ApiServerEmulator) -> None:
    """A node whose device plugin is registered, and which carries others' taints."""

    def change(node: dict[str, Any]) -> None:
        node["spec"]["taints"] = copy.deepcopy(FOREIGN)
        node["status"]["allocatable"] = {"cpu": "224", "nvidia.com/gpu": "8"}

    emulator.edit_object("nodes", NODE, mutate=change)


@pytest.fixture
def agent(
    machine: SimulatedMachine,
    reader: NvmlReader,
    client: KubeClient,
    stop: threading.Event,
    emulator: ApiServerEmulator,
) -> Agent:
    seed_node(emulator)
    sink = NodeSink(client=client, node_name=NODE, stop=stop)
    writers = HealthOutputs(
        [
            NodeConditionWriter(client=client, node_sink=sink, stop=stop),
            NodeTaintWriter(client=client, node_sink=sink, stop=stop, effect="NoSchedule"),
        ]
    )
    health = HealthReporter(
        HealthMonitor(sysfs_root=machine.sysfs_root, grace_period=300, log=get_logger()),
        log=get_logger(),
        read_node=node_reader(sink),
        writer=writers,
    )
    return Agent(
        read_facts=reader.read,
        sinks=[sink],
        options=LabelOptions(),
        log=get_logger(),
        health=health,
    )


def taints(emulator: ApiServerEmulator) -> list[dict[str, str]]:
    return list(emulator.node(NODE)["spec"].get("taints") or [])


def test_a_lost_gpu_taints_the_node_and_recovery_untaints_it(
    agent: Agent, machine: SimulatedMachine, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    assert agent.cycle().ok
    assert taints(emulator) == FOREIGN

    serve(machine, without_last_gpu(FACTS), tmp_path)
    assert agent.cycle().ok
    condition = emulator.node_condition(NODE, CONDITION_TYPE)
    assert condition is not None and condition["reason"] == "GPULost"
    assert taints(emulator) == [
        *FOREIGN,
        {"key": TAINT_KEY, "value": "GPULost", "effect": "NoSchedule"},
    ]
    assert emulator.node_annotations(NODE)[TAINT_OWNERSHIP_ANNOTATION] == f"{TAINT_KEY}:NoSchedule"
    # One Event for the condition, one for the taint.
    assert [e["reason"] for e in emulator.events(EVENT_NAMESPACE)] == ["GPULost", TAINT_ADDED]

    # Unhealthy and steady: no write at all, one read of the node.
    emulator.clear_log()
    assert agent.cycle().ok
    assert emulator.count(writes=True) == 0
    assert emulator.count(method="GET") == 1

    serve(machine, FACTS, tmp_path)
    assert agent.cycle().ok
    assert taints(emulator) == FOREIGN
    assert TAINT_OWNERSHIP_ANNOTATION not in emulator.node_annotations(NODE)
    assert [e["reason"] for e in emulator.events(EVENT_NAMESPACE)][-2:] == [
        "GPUsHealthy",
        TAINT_REMOVED,
    ]
    emulator.clear_log()
    assert agent.cycle().ok
    assert emulator.count(writes=True) == 0


def test_a_gpu_answering_gpu_is_lost_taints_the_node_in_the_same_cycle(
    agent: Agent, machine: SimulatedMachine, emulator: ApiServerEmulator, tmp_path: Path
) -> None:
    assert agent.cycle().ok
    serve(machine, FACTS, tmp_path, Faults(gpu_lost=(GpuLost(gpu=LAST, after_calls=0),)))
    assert not agent.cycle().ok
    assert taints(emulator)[-1] == {"key": TAINT_KEY, "value": "GPULost", "effect": "NoSchedule"}
    assert taints(emulator)[:-1] == FOREIGN


# ---------------------------------------------------------------- whole processes


def gfd(kubeconfig: Path, profile: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    command = [
        sys.executable,
        "-m",
        "gfd",
        "--simulate",
        profile,
        "--oneshot",
        "--patch-node",
        "--no-output-file",
        "--health-taint",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(kubeconfig),
        *extra,
    ]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_gfd_with_health_taint_taints_and_untaints_its_node(
    emulator: ApiServerEmulator, cluster: object, kubeconfig: Path, tmp_path: Path
) -> None:
    seed_node(emulator)
    faulty = tmp_path / "dgx-h100-gpu3-lost.yaml"
    document = yaml.safe_load((ROOT / "gfd/sim/profiles/dgx-h100.yaml").read_text())
    document["faults"] = {"gpu_lost": [{"gpu": 3, "after_calls": 0}]}
    faulty.write_text(yaml.safe_dump(document), encoding="utf-8")

    lost = gfd(kubeconfig, str(faulty), "--health-taint-effect=NoExecute")
    assert lost.returncode != 0, lost.stderr[-2000:]  # the read failed: GPU 3 is lost
    assert taints(emulator) == [
        *FOREIGN,
        {"key": TAINT_KEY, "value": "GPULost", "effect": "NoExecute"},
    ]

    recovered = gfd(kubeconfig, PROFILE, "--health-taint-effect=NoExecute")
    assert recovered.returncode == 0, recovered.stderr[-2000:]
    assert taints(emulator) == FOREIGN
    reasons = [e["reason"] for e in emulator.events(EVENT_NAMESPACE)]
    assert reasons == ["GPULost", TAINT_ADDED, "GPUsHealthy", TAINT_REMOVED]
