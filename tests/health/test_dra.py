"""DRA nodes in the ``device-plugin`` check: NVIDIA's DRA driver (``gpu.nvidia.com``)
publishes the GPUs as ResourceSlices and the kubelet advertises no ``nvidia.com/gpu``.

The slices are shaped as the driver publishes them (docs/health.md, "DRA nodes"): one
device per full GPU, named ``gpu-<minor>``, with the string attributes ``type`` (``gpu``)
and ``uuid``; one per MIG device with ``type`` ``mig``, its own ``uuid`` and the
``parentUUID`` of its GPU; dynamic MIG devices without a ``uuid`` until allocated; device
taints from the driver's health monitoring; pools with a generation. The check's reads are
counted through a recording lister and, end to end, in the emulator's request log.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gfd.agent import Agent
from gfd.base.errors import SinkError
from gfd.base.logs import get_logger
from gfd.facts import Gpu, NodeFacts
from gfd.health import (
    CONDITION_TYPE,
    DEVICE_PLUGIN,
    FAILING,
    OK,
    PENDING,
    HealthMonitor,
    HealthReporter,
)
from gfd.health.checks.device_plugin import dra_expectation, dra_problems
from gfd.health.condition import NodeConditionWriter, node_reader
from gfd.health.dra_node import DRA_DRIVER, DraNodeWatch, PublishedDevice, published_devices
from gfd.health.resource_slices import RESOURCE_SLICES_PATH, ResourceSliceReader
from gfd.kube_api import KubeClient
from gfd.labels import LabelOptions
from gfd.sinks.node import NodeSink
from tests.emulator import ApiServerEmulator
from tests.emulator.server import GFD_RULES, Principal
from tests.factories import make_facts, make_gpu
from tests.health.doubles import EIGHT, Clock, Log, node
from tests.kube_fixtures import NODE, TOKEN
from tests.mig_factories import a100_split

# ---------------------------------------------------------------- slices as the driver writes them


def gpu_device(gpu: Gpu, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"gpu-{gpu.index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu.uuid},
            "productName": {"string": gpu.name},
            "driverVersion": {"version": "580.95.5"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
        **extra,
    }


def mig_devices(gpu: Gpu) -> list[dict[str, Any]]:
    return [
        {
            "name": f"gpu-{gpu.index}-mig-{mig.gpu_instance_id}-{mig.compute_instance_id}",
            "attributes": {
                "type": {"string": "mig"},
                "uuid": {"string": mig.uuid},
                "parentUUID": {"string": gpu.uuid},
                "profile": {"string": "3g.20gb"},
            },
        }
        for mig in gpu.mig_devices
    ]


def resource_slice(
    devices: Sequence[Mapping[str, Any]],
    *,
    node_name: str = "gpu-node-1",
    driver: str = DRA_DRIVER,
    pool: str | None = None,
    generation: int = 1,
    name: str = "gpu-node-1-gpu.nvidia.com-abcde",
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def split(index: int) -> Gpu:
    """An A100 split in two, with MIG UUIDs of its own."""
    gpu = a100_split(index, "3g.20gb", "3g.20gb")
    migs = tuple(
        dataclasses.replace(m, uuid=f"MIG-{index:08x}-0000-0000-0000-{m.index:012x}")
        for m in gpu.mig_devices
    )
    return dataclasses.replace(gpu, mig_devices=migs)


def published(*slices: Mapping[str, Any]) -> tuple[PublishedDevice, ...]:
    found = published_devices(slices)
    assert found is not None
    return found


# ---------------------------------------------------------------- reading the slices


def test_a_node_without_the_drivers_slices_has_no_dra() -> None:
    assert published_devices([]) is None
    other = resource_slice([{"name": "nic-0"}], driver="dra.net")
    assert published_devices([other]) is None


def test_devices_carry_their_kind_uuid_parent_and_blocking_taints() -> None:
    gpu = EIGHT.gpus[0]
    tainted = gpu_device(
        gpu,
        taints=[
            {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"},
            {"key": "gpu.nvidia.com/note", "effect": "None"},
        ],
    )
    mig = split(1)
    devices = published(resource_slice([tainted, *mig_devices(mig)]))
    assert devices[0] == PublishedDevice(
        "gpu-0", "gpu", gpu.uuid, None, ("gpu.nvidia.com/xid=79:NoExecute",)
    )
    assert [(d.kind, d.uuid, d.parent_uuid) for d in devices[1:]] == [
        ("mig", m.uuid, mig.uuid) for m in mig.mig_devices
    ]


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = resource_slice([gpu_device(g) for g in EIGHT.gpus], generation=1, name="a")
    new = resource_slice([gpu_device(g) for g in EIGHT.gpus[:7]], generation=2, name="b")
    assert [d.name for d in published(old, new)] == [f"gpu-{i}" for i in range(7)]


# ---------------------------------------------------------------- judging them


def test_every_gpu_published_is_no_problem() -> None:
    devices = published(resource_slice([gpu_device(g) for g in EIGHT.gpus]))
    assert dra_problems(EIGHT, devices) == []


def test_a_gpu_missing_from_the_slices_is_named() -> None:
    devices = published(resource_slice([gpu_device(g) for g in EIGHT.gpus if g.index != 3]))
    [problem] = dra_problems(EIGHT, devices)
    assert (problem.check, problem.reason) == (DEVICE_PLUGIN, "AllocatableMismatch")
    assert problem.message == (
        f"the DRA driver {DRA_DRIVER} publishes 7 of 8 devices in the node's ResourceSlices; "
        "missing: GPU 3 (0000:1e:00.0)"
    )


def test_mig_gpus_are_published_by_their_mig_devices() -> None:
    facts = make_facts([make_gpu(0), split(1)])
    gpu, mig = facts.gpus
    whole = resource_slice([gpu_device(gpu), *mig_devices(mig)])
    assert dra_problems(facts, published(whole)) == []
    assert dra_expectation(facts) == tuple(sorted([gpu.uuid, *(m.uuid for m in mig.mig_devices)]))
    short = resource_slice([gpu_device(gpu), *mig_devices(mig)[:1]])
    [problem] = dra_problems(facts, published(short))
    assert problem.message.endswith(
        f"missing: MIG device {mig.mig_devices[1].uuid} of GPU 1 (0000:1c:00.0)"
    )


def test_dynamic_mig_devices_without_uuids_stand_for_their_gpu() -> None:
    facts = make_facts([split(0)])
    gpu = facts.gpus[0]
    on_demand = {
        "name": "gpu-0-mig-3g20gb-0",
        "attributes": {"type": {"string": "mig"}, "parentUUID": {"string": gpu.uuid}},
    }
    assert dra_problems(facts, published(resource_slice([on_demand]))) == []


def test_a_mig_enabled_gpu_without_mig_devices_offers_nothing_to_publish() -> None:
    facts = make_facts([dataclasses.replace(split(0), mig_devices=())])
    assert dra_problems(facts, published(resource_slice([]))) == []


def test_a_device_the_driver_taints_is_a_problem() -> None:
    gpus = [gpu_device(g) for g in EIGHT.gpus]
    gpus[5]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}]
    [problem] = dra_problems(EIGHT, published(resource_slice(gpus)))
    assert problem.message == (
        f"the DRA driver {DRA_DRIVER} taints GPU 5 (0000:20:00.0) "
        "(gpu.nvidia.com/xid=48:NoSchedule)"
    )


# ---------------------------------------------------------------- the check, with a recording lister


class Slices:
    """The lister the check is given: answers ``items`` (or raises ``error``), counted."""

    def __init__(self, *items: Mapping[str, Any]) -> None:
        self.items = list(items)
        self.error: SinkError | None = None
        self.calls = 0

    def __call__(self) -> list[Mapping[str, Any]]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.items


def monitor(
    slices: Slices,
    clock: Clock,
    log: Log | None = None,
    *,
    interval: int = 5,
    previous: HealthMonitor | None = None,
) -> HealthMonitor:
    watch = previous.setup.dra_node if previous is not None else None
    return HealthMonitor(
        sysfs_root=Path("/nonexistent"),
        checks=(DEVICE_PLUGIN,),
        grace_period=300,
        clock=clock,
        log=log,
        dra_node=DraNodeWatch(slices, interval=interval, log=log, previous=watch),
        previous=previous,
    )


ALL_EIGHT = resource_slice([gpu_device(g) for g in EIGHT.gpus])
SEVEN = resource_slice([gpu_device(g) for g in EIGHT.gpus if g.index != 3])
DRA_NODE = node({"cpu": "96", "memory": "1Ti"})


def test_a_dra_node_with_every_gpu_published_has_no_alarm() -> None:
    result = monitor(Slices(ALL_EIGHT), Clock()).observe(EIGHT, node=DRA_NODE).results[0]
    assert result.state == OK


def test_a_gpu_missing_from_the_slices_is_reported_after_the_grace_period() -> None:
    clock = Clock()
    checks = monitor(Slices(SEVEN), clock)
    assert checks.observe(EIGHT, node=DRA_NODE).results[0].state == PENDING
    clock.now += 299
    assert checks.observe(EIGHT, node=DRA_NODE).results[0].state == PENDING
    clock.now += 1
    result = checks.observe(EIGHT, node=DRA_NODE).results[0]
    assert result.state == FAILING
    assert [p.reason for p in result.problems] == ["AllocatableMismatch"]
    assert "missing: GPU 3 (0000:1e:00.0)" in result.problems[0].message


def test_a_node_with_neither_plugin_nor_driver_is_reported_as_before() -> None:
    clock = Clock()
    checks = monitor(Slices(), clock)
    checks.observe(EIGHT, node=DRA_NODE)
    clock.now += 300
    result = checks.observe(EIGHT, node=DRA_NODE).results[0]
    assert (result.state, [p.reason for p in result.problems]) == (
        FAILING,
        ["DevicePluginMissing"],
    )


def test_a_node_whose_plugin_is_registered_never_reads_the_slices() -> None:
    slices = Slices(ALL_EIGHT)
    checks = monitor(slices, Clock())
    for _ in range(12):
        assert checks.observe(EIGHT, node=node({"nvidia.com/gpu": "8"})).results[0].state == OK
    assert slices.calls == 0


def test_the_slices_are_read_once_every_interval_or_when_allocatable_changes() -> None:
    slices = Slices(ALL_EIGHT)
    checks = monitor(slices, Clock(), interval=5)
    for _ in range(10):
        checks.observe(EIGHT, node=DRA_NODE)
    assert slices.calls == 2
    # The kubelet's allocatable changed: read at once, and the count starts over.
    checks.observe(EIGHT, node=node({"cpu": "95", "memory": "1Ti"}))
    assert slices.calls == 3
    for _ in range(4):
        checks.observe(EIGHT, node=node({"cpu": "95", "memory": "1Ti"}))
    assert slices.calls == 3


def test_a_gpu_gone_from_the_slices_is_seen_at_the_next_read() -> None:
    slices = Slices(ALL_EIGHT)
    checks = monitor(slices, Clock(), interval=2)
    assert checks.observe(EIGHT, node=DRA_NODE).results[0].state == OK
    slices.items = [SEVEN]
    assert checks.observe(EIGHT, node=DRA_NODE).results[0].state == OK  # not read yet
    assert checks.observe(EIGHT, node=DRA_NODE).results[0].state == PENDING
    assert slices.calls == 2


def test_slices_that_cannot_be_read_leave_the_check_as_before_and_say_so_once() -> None:
    clock, log = Clock(), Log()
    slices = Slices()
    slices.error = SinkError('resourceslices.resource.k8s.io is forbidden: User "gfd" cannot list')
    checks = monitor(slices, clock, log, interval=1)
    for _ in range(3):
        result = checks.observe(EIGHT, node=DRA_NODE).results[0]
    assert [p.reason for p in result.problems] == ["DevicePluginMissing"]
    assert slices.calls == 3
    warnings = [line for line in log.lines if line[1] == "ResourceSlices not read"]
    assert len(warnings) == 1 and "forbidden" in warnings[0][2]["reason"]


def test_a_reload_keeps_the_reading_cadence() -> None:
    slices, clock = Slices(ALL_EIGHT), Clock()
    first = monitor(slices, clock, interval=5)
    first.observe(EIGHT, node=DRA_NODE)
    second = monitor(slices, clock, interval=5, previous=first)
    for _ in range(3):
        assert second.observe(EIGHT, node=DRA_NODE).results[0].state == OK
    assert slices.calls == 1


# ---------------------------------------------------------------- the read, against the API


def test_the_reader_lists_its_nodes_slices_by_field_selector(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    emulator.add_resource_slice(
        "mine", node_name=NODE, driver=DRA_DRIVER, devices=[gpu_device(EIGHT.gpus[0])]
    )
    emulator.add_resource_slice("other-node", node_name="gpu-node-2", driver=DRA_DRIVER, devices=[])
    emulator.add_resource_slice("nics", node_name=NODE, driver="dra.net", devices=[])
    reader = ResourceSliceReader(client=client, node_name=NODE, stop=stop)
    assert [s["metadata"]["name"] for s in reader.list()] == ["mine"]
    [request] = [r for r in emulator.requests if r.path == RESOURCE_SLICES_PATH]
    assert (request.method, request.query) == (
        "GET",
        {"fieldSelector": f"spec.nodeName={NODE}", "resourceVersion": "0"},
    )
    assert reader.lists == 1


def test_the_emulator_filters_by_the_fields_the_api_server_registers(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    for name, node_name, driver in (
        ("a", NODE, DRA_DRIVER),
        ("b", "gpu-node-2", DRA_DRIVER),
        ("c", NODE, "dra.net"),
    ):
        emulator.add_resource_slice(name, node_name=node_name, driver=driver, devices=[])

    def names(selector: str) -> list[str]:
        answer = client.request(
            "GET",
            RESOURCE_SLICES_PATH,
            stop=stop,
            deadline=client.deadline(),
            query={"fieldSelector": selector},
        ).json_object("list")
        return [item["metadata"]["name"] for item in answer["items"]]

    assert names(f"spec.nodeName={NODE}") == ["a", "c"]
    assert names(f"spec.nodeName=={NODE},spec.driver={DRA_DRIVER}") == ["a"]
    assert names(f"spec.driver!={DRA_DRIVER}") == ["c"]
    assert names("metadata.name=b") == ["b"]
    refused = client.request(
        "GET",
        RESOURCE_SLICES_PATH,
        stop=stop,
        deadline=client.deadline(),
        query={"fieldSelector": "spec.pool.name=x"},
        accept_statuses=(400,),
    )
    assert refused.status == 400


def test_without_the_rbac_rule_the_read_fails_with_the_servers_words(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    rules = frozenset(rule for rule in GFD_RULES if rule != ("list", "resourceslices"))
    emulator.set_token(TOKEN, Principal("system:serviceaccount:gpu-operator:gfd", rules))
    reader = ResourceSliceReader(client=client, node_name=NODE, stop=stop)
    with pytest.raises(SinkError, match="cannot list resource .resourceslices."):
        reader.list()


# ---------------------------------------------------------------- end to end: agent, emulator


def dra_agent(
    facts: NodeFacts, client: KubeClient, stop: threading.Event, clock: Clock
) -> tuple[Agent, ResourceSliceReader]:
    """An agent with the node sink, the condition and the device-plugin check reading the
    emulator's ResourceSlices, on ``facts`` (no simulator needed: this check reads none)."""
    sink = NodeSink(client=client, node_name=NODE, stop=stop)
    reader = ResourceSliceReader(client=client, node_name=NODE, stop=stop)
    health = HealthReporter(
        HealthMonitor(
            sysfs_root=Path("/nonexistent"),
            checks=(DEVICE_PLUGIN,),
            grace_period=300,
            clock=clock,
            dra_node=DraNodeWatch(reader.list),
        ),
        log=get_logger(),
        read_node=node_reader(sink),
        writer=NodeConditionWriter(client=client, node_sink=sink, stop=stop),
    )
    agent = Agent(
        read_facts=lambda: facts,
        sinks=[sink],
        options=LabelOptions(),
        log=get_logger(),
        health=health,
    )
    return agent, reader


def test_a_dra_node_gets_no_device_plugin_alarm_and_a_missing_gpu_after_the_grace_period(
    emulator: ApiServerEmulator, client: KubeClient, stop: threading.Event
) -> None:
    emulator.set_node_status(NODE, allocatable={"cpu": "96", "memory": "1Ti", "pods": "110"})
    emulator.add_resource_slice(
        "gpus", node_name=NODE, driver=DRA_DRIVER, devices=[gpu_device(g) for g in EIGHT.gpus]
    )
    clock = Clock()
    agent, reader = dra_agent(EIGHT, client, stop, clock)
    assert agent.cycle().ok
    healthy = emulator.node_condition(NODE, CONDITION_TYPE)
    assert healthy is not None and (healthy["status"], healthy["reason"]) == (
        "True",
        "GPUsHealthy",
    )
    clock.now += 600
    assert agent.cycle().ok
    assert emulator.node_condition(NODE, CONDITION_TYPE) == healthy

    # The driver republishes the pool without GPU 3 (a newer generation).
    emulator.add_resource_slice(
        "gpus-2",
        node_name=NODE,
        driver=DRA_DRIVER,
        devices=[gpu_device(g) for g in EIGHT.gpus if g.index != 3],
        generation=2,
    )
    for _ in range(4):  # the slices are read again on the fifth cycle after the last read
        assert agent.cycle().ok
    assert reader.lists == 2
    assert emulator.node_condition(NODE, CONDITION_TYPE) == healthy  # grace period running
    clock.now += 300
    assert agent.cycle().ok
    missing = emulator.node_condition(NODE, CONDITION_TYPE)
    assert missing is not None and (missing["status"], missing["reason"]) == (
        "False",
        "AllocatableMismatch",
    )
    assert missing["message"].endswith("missing: GPU 3 (0000:1e:00.0)")
    # The steady state: one list per five cycles, no write.
    emulator.clear_log()
    for _ in range(5):
        assert agent.cycle().ok
    assert emulator.count(writes=True) == 0
    assert emulator.count(path_contains="resourceslices") == 1
