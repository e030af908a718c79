"""The node condition writer: gfd's ``GPUHealthy`` condition on its Node, and an Event per change.

This module owns how the health state (:mod:`gfd.health`) reaches the API server:

* the condition is written with one strategic merge patch on ``nodes/<node>/status``
  whose ``conditions`` list holds gfd's entry alone; Node conditions merge by ``type``,
  so the kubelet's conditions and node-problem-detector's are left as they are. It is
  written only when the Node's condition differs from the state (status, reason,
  message): a steady state costs no write. ``lastTransitionTime`` moves only when the
  status flips; ``lastHeartbeatTime`` is the time of the write.
* each change of state is recorded as a core/v1 Event about the Node, in the
  ``default`` namespace: the API server files Events about cluster-scoped objects
  there (it refuses a legacy Event whose namespace differs from its object's, and a
  Node has none), and ``kubectl describe node`` finds them.

It reads nothing itself: the Node comes from the node sink's read of the cycle
(:meth:`gfd.sinks.node.NodeSink.read_ahead`). A write that fails is logged and
tried again next cycle, because the Node still differs; an Event that fails is
logged and not repeated, so an outage never turns into a burst of duplicates.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gfd.errors import SinkError, shorten
from gfd.health import (
    CONDITION_TYPE,
    HealthState,
    Transition,
    node_condition,
    state_from_condition,
)
from gfd.kube_api import JSON, STRATEGIC_MERGE_PATCH, KubeClient, path_segment
from gfd.logs import get_logger
from gfd.sinks.node import NodeSink

log = get_logger()

#: Where Events about a Node go (see the module docstring).
EVENT_NAMESPACE = "default"
#: How gfd names itself in the Events it records.
COMPONENT = "gfd"


def rfc3339(seconds: float) -> str:
    """Whole-second UTC time as Kubernetes writes it: ``2026-12-03T18:04:05Z``."""
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_patch(state: HealthState, *, heartbeat: str, transition_time: str) -> dict[str, Any]:
    """The strategic merge patch body that sets gfd's condition and nothing else."""
    return {
        "status": {
            "conditions": [
                {
                    "type": CONDITION_TYPE,
                    "status": state.status,
                    "reason": state.reason,
                    "message": state.message,
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": transition_time,
                }
            ]
        }
    }


def event_body(
    transition: Transition, *, node: Mapping[str, Any] | None, node_name: str, now: float
) -> dict[str, Any]:
    """A core/v1 Event recording ``transition`` on the Node named ``node_name``."""
    state = transition.state
    involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "name": node_name}
    metadata = node.get("metadata") if isinstance(node, Mapping) else None
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    if isinstance(uid, str) and uid:
        involved["uid"] = uid
    message = state.message
    if state.healthy and transition.previous is not None:
        message = f"{message} (was {transition.previous.reason})"
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            # As client-go names Events: the object, then the time in hex nanoseconds.
            "name": f"{node_name}.{int(now * 1e9):x}",
            "namespace": EVENT_NAMESPACE,
        },
        "involvedObject": involved,
        "reason": state.reason,
        "message": shorten(message, 1024),
        "type": "Normal" if state.healthy else "Warning",
        "source": {"component": COMPONENT, "host": node_name},
        "reportingComponent": COMPONENT,
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def node_reader(sink: NodeSink) -> Callable[[], Mapping[str, Any] | None]:
    """The health checks' view of the Node: the node sink's read of the cycle, made early
    (:meth:`~gfd.sinks.node.NodeSink.read_ahead`), or None when it failed; the node sink
    then reads again when it publishes, and reports the failure itself."""

    def read() -> Mapping[str, Any] | None:
        try:
            return sink.read_ahead()
        except SinkError as exc:
            log.debug("node read for the health checks failed", reason=str(exc))
            return None

    return read


class NodeConditionWriter:
    """Keeps the ``GPUHealthy`` condition of ``node_sink``'s Node equal to the health state."""

    def __init__(
        self,
        *,
        client: KubeClient,
        node_sink: NodeSink,
        stop: threading.Event,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._sink = node_sink
        self.node_name = node_sink.node_name
        self._stop = stop
        self._wall_clock = wall_clock
        self._status_path = f"/api/v1/nodes/{path_segment(self.node_name)}/status"
        self._events_path = f"/api/v1/namespaces/{EVENT_NAMESPACE}/events"
        #: The condition as the Node holds it, as far as gfd knows (read or written).
        self._known: Mapping[str, Any] | None = None
        self._node_seen = False
        #: The heartbeat of gfd's last write: an older one in a read is the API server's
        #: cache lagging behind that write, not somebody else's change.
        self._last_heartbeat = ""
        self._reported: set[str] = set()

    def saw(self, node: Mapping[str, Any]) -> None:
        condition = node_condition(node)
        heartbeat = condition.get("lastHeartbeatTime") if condition else None
        if isinstance(heartbeat, str) and heartbeat < self._last_heartbeat:
            return  # the API server's cache, behind gfd's own last write
        self._known = condition
        self._node_seen = True

    def write(self, state: HealthState, transition: Transition | None) -> None:
        if not self._node_seen and transition is None:
            # Never seen the Node: write once it is known, so a restart costs no write.
            return
        known = state_from_condition(self._known)
        if not state.same_condition(known):
            self._write_condition(state, known)
        if transition is not None:
            self._record(transition)

    def _write_condition(self, state: HealthState, known: HealthState | None) -> None:
        now = rfc3339(self._wall_clock())
        previous_time = self._known.get("lastTransitionTime") if self._known else None
        keep_time = known is not None and known.status == state.status
        transition_time = previous_time if keep_time and isinstance(previous_time, str) else now
        body = condition_patch(state, heartbeat=now, transition_time=transition_time)
        if not self._send(
            "PATCH", self._status_path, body, STRATEGIC_MERGE_PATCH, "node condition not written"
        ):
            return
        self._known = body["status"]["conditions"][0]
        self._last_heartbeat = now
        log.info(
            "node_condition_updated",
            node=self.node_name,
            condition=CONDITION_TYPE,
            status=state.status,
            reason=state.reason,
        )

    def _record(self, transition: Transition) -> None:
        body = event_body(
            transition,
            node=self._sink.last_node,
            node_name=self.node_name,
            now=self._wall_clock(),
        )
        self._send("POST", self._events_path, body, JSON, "node event not recorded")

    def _send(self, method: str, path: str, body: Any, content_type: str, failure: str) -> bool:
        """One write; a failure is reported (as ``failure``), never raised."""
        try:
            self._client.request(
                method,
                path,
                stop=self._stop,
                deadline=self._client.deadline(),
                body=body,
                content_type=content_type,
            )
        except SinkError as exc:
            self._report_failure(failure, exc)
            return False
        return True

    def _report_failure(self, event: str, exc: SinkError) -> None:
        reason = str(exc)
        # Once per distinct reason at warning level: a missing RBAC rule must not flood.
        key = f"{event}: {reason}"
        if key in self._reported:
            log.debug(event, node=self.node_name, reason=reason)
            return
        self._reported.add(key)
        log.warning(event, node=self.node_name, reason=reason)
