"""The ``GPUHealthy`` condition writer against both API servers (the project's emulator
and kmock, see :mod:`tests.kube.servers`): one status-subresource patch per change of
state, none in a steady state, and one Event per transition in ``default``.

The agent-level health tests (``test_health_condition.py``) stay on the emulator: they
check that the kubelet's own conditions survive gfd's patch, which needs a strategic
merge of ``status.conditions`` by ``type``; kmock replaces lists whole
(``test_kmock_limits.py`` shows it).
"""

from __future__ import annotations

import threading

from gfd.health import CONDITION_TYPE, HealthState, Transition, node_condition
from gfd.health.condition import EVENT_NAMESPACE, NodeConditionWriter
from gfd.kube_api import KubeClient
from gfd.sinks.node import NodeSink
from tests.kube.conftest import NODE
from tests.kube.servers import EVENTS, NODES, ApiServer, writes

LOST = HealthState(
    healthy=False,
    reason="GPULost",
    message="GPU 7 (0000:df:00.0) is lost",
    failing_checks=frozenset({"gpu-lost"}),
)
HEALTHY = HealthState(healthy=True, reason="GPUsHealthy", message="every GPU health check passes")


def writer_for(client: KubeClient, stop: threading.Event) -> tuple[NodeSink, NodeConditionWriter]:
    sink = NodeSink(client=client, node_name=NODE, stop=stop)
    clock = iter(range(1_767_225_600, 1_767_225_700, 10))
    writer = NodeConditionWriter(
        client=client, node_sink=sink, stop=stop, wall_clock=lambda: float(next(clock))
    )
    return sink, writer


def stored_condition(api: ApiServer) -> dict[str, str]:
    node = api.get(NODES, NODE)
    found = node_condition(node)
    assert found is not None, node
    return dict(found)


def test_a_change_of_state_is_one_status_patch_and_one_event(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink, writer = writer_for(api_client, stop)
    writer.saw(sink.read_ahead())
    api.clear_log()

    writer.write(LOST, Transition(previous=None, state=LOST))

    condition = stored_condition(api)
    assert (condition["type"], condition["status"], condition["reason"]) == (
        CONDITION_TYPE,
        "False",
        "GPULost",
    )
    assert condition["message"] == LOST.message
    assert [(r.method, r.path, r.content_type) for r in writes(api)] == [
        ("PATCH", f"/api/v1/nodes/{NODE}/status", "application/strategic-merge-patch+json"),
        ("POST", f"/api/v1/namespaces/{EVENT_NAMESPACE}/events", "application/json"),
    ]
    (event,) = api.list(EVENTS, EVENT_NAMESPACE)
    node = api.get(NODES, NODE)
    assert node is not None
    assert event["involvedObject"]["uid"] == node["metadata"]["uid"]
    assert (event["reason"], event["type"]) == ("GPULost", "Warning")


def test_a_steady_state_writes_nothing_and_recovery_moves_the_transition_time(
    api: ApiServer, api_client: KubeClient, stop: threading.Event
) -> None:
    sink, writer = writer_for(api_client, stop)
    writer.saw(sink.read_ahead())
    writer.write(LOST, Transition(previous=None, state=LOST))
    first = stored_condition(api)
    api.clear_log()

    writer.saw(sink.read_ahead())
    writer.write(LOST, None)
    assert writes(api) == []

    writer.write(HEALTHY, Transition(previous=LOST, state=HEALTHY))
    healed = stored_condition(api)
    assert (healed["status"], healed["reason"]) == ("True", "GPUsHealthy")
    assert healed["lastTransitionTime"] > first["lastTransitionTime"]
    assert [e["reason"] for e in api.list(EVENTS, EVENT_NAMESPACE)] == ["GPULost", "GPUsHealthy"]
