"""The ``GPUHealthy`` node condition: the state gfd reports, and its writer.

This module owns the condition end to end:

* :class:`HealthState`, what gfd reports (status, reason, message; the label
  ``nvidia.com/gpu.health`` shows its reason), decided from a cycle's verdict
  (:func:`state_of`) or read back from the condition a previous gfd left on the Node
  (:func:`node_condition`, :func:`state_from_condition`); :class:`Transition`, a change
  of it, and which changes are worth an Event;
* :class:`NodeConditionWriter`, which writes the condition with one strategic merge
  patch on ``nodes/<node>/status`` whose ``conditions`` list holds gfd's entry alone;
  Node conditions merge by ``type``, so the kubelet's conditions and
  node-problem-detector's are left as they are. It is written only when the Node's
  condition differs from the state (status, reason, message): a steady state costs no
  write. ``lastTransitionTime`` moves only when the status flips; ``lastHeartbeatTime``
  is the time of the write;
* each change of state recorded as a core/v1 Event about the Node, in the ``default``
  namespace: the API server files Events about cluster-scoped objects there (it refuses a
  legacy Event whose namespace differs from its object's, and a Node has none), and
  ``kubectl describe node`` finds them.

The writer reads nothing itself: the Node comes from the node sink's read of the cycle
(:func:`node_reader`). A write that fails is logged and tried again next cycle, because
the Node still differs; an Event that fails is logged and not repeated, so an outage
never turns into a burst of duplicates. The node sink is seen through :class:`NodeSource`,
and the API client is imported only by the writer: the checks never load it.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gfd.base.errors import SinkError, shorten
from gfd.base.frozen import frozen_dataclass
from gfd.base.logs import get_logger
from gfd.health.check import CANNOT_DECIDE, OK, Verdict

if TYPE_CHECKING:
    from gfd.kube_api import KubeClient

log = get_logger()

CONDITION_TYPE = "GPUHealthy"
HEALTH_LABEL = "nvidia.com/gpu.health"
#: The label's value while every check passes.
HEALTHY_LABEL_VALUE = "healthy"
REASON_HEALTHY = "GPUsHealthy"
#: The longest condition message gfd writes (kubectl shows it whole).
MAX_MESSAGE = 1024

#: Where Events about a Node go (see the module docstring).
EVENT_NAMESPACE = "default"
#: How gfd names itself in the Events it records.
COMPONENT = "gfd"


# --------------------------------------------------------------------------- #
# The reported state


@frozen_dataclass
class HealthState:
    """What gfd reports: the ``GPUHealthy`` condition's status, reason and message."""

    healthy: bool
    reason: str
    message: str
    #: The checks whose problems make up the message; empty when healthy.
    failing_checks: frozenset[str] = frozenset()

    @property
    def status(self) -> str:
        return "True" if self.healthy else "False"

    @property
    def label_value(self) -> str:
        return HEALTHY_LABEL_VALUE if self.healthy else self.reason

    def same_condition(self, other: HealthState | None) -> bool:
        return other is not None and (self.status, self.reason, self.message) == (
            other.status,
            other.reason,
            other.message,
        )


def state_of(verdict: Verdict, priority: Sequence[str]) -> HealthState | None:
    """The state ``verdict`` decides, or None when it decides nothing (see
    :class:`~gfd.health.reporter.HealthReporter`). ``priority``: the reasons, most urgent
    first; the state's reason is the first that applies, and the message lists the
    problems in that order."""
    failing = verdict.failing
    if failing:
        rank = {reason: position for position, reason in enumerate(priority)}
        ordered = sorted(failing, key=lambda p: rank.get(p.reason, len(rank)))
        message = "; ".join(problem.message for problem in ordered)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
        return HealthState(
            healthy=False,
            reason=ordered[0].reason,
            message=message,
            failing_checks=frozenset(p.check for p in failing),
        )
    if not verdict.decided:
        return None
    passed = ", ".join(r.check for r in verdict.results if r.state == OK) or "none"
    message = f"every GPU health check passes ({passed})"
    # Named, not explained: the reasons are in the log and the metrics, and a message that
    # changed with them would cost a write each time.
    undecided = [r.check for r in verdict.results if r.state == CANNOT_DECIDE]
    if undecided:
        message += f"; cannot decide: {', '.join(undecided)}"
    return HealthState(healthy=True, reason=REASON_HEALTHY, message=message)


def state_from_condition(condition: Mapping[str, Any] | None) -> HealthState | None:
    """The state a ``GPUHealthy`` condition on the Node records (gfd's own, earlier)."""
    if not isinstance(condition, Mapping):
        return None
    status, reason, message = (condition.get(k) for k in ("status", "reason", "message"))
    if status not in ("True", "False") or not isinstance(reason, str):
        return None
    return HealthState(
        healthy=status == "True",
        reason=reason,
        message=message if isinstance(message, str) else "",
    )


def node_condition(node: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The ``GPUHealthy`` entry of a Node's ``status.conditions``, if there is one."""
    status = node.get("status") if isinstance(node, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_TYPE:
            return condition
    return None


@frozen_dataclass
class Transition:
    """The reported state changed this cycle: ``previous`` (None: nothing known) to ``state``."""

    previous: HealthState | None
    state: HealthState

    @property
    def worth_an_event(self) -> bool:
        """A change to or between problems, or back to health; not the first healthy
        state of a node nothing was known of, nor a healthy state reworded."""
        if self.previous is None:
            return not self.state.healthy
        return not (self.previous.healthy and self.state.healthy)


class ConditionWriter(Protocol):
    """Where the state goes beyond logs and metrics: the Node's condition, Events."""

    def saw(self, node: Mapping[str, Any]) -> None:
        """The Node as this cycle read it (what its condition says now)."""
        ...

    def write(self, state: HealthState, transition: Transition | None) -> None:
        """Make the Node's condition say ``state`` (when it does not), and record
        ``transition`` as an Event. Failures are logged, never raised: the condition is
        written again next cycle."""
        ...


# --------------------------------------------------------------------------- #
# The writer


class NodeSource(Protocol):
    """The node sink (:class:`gfd.sinks.node.NodeSink`) as the condition needs it."""

    @property
    def node_name(self) -> str: ...

    @property
    def last_node(self) -> Mapping[str, Any] | None:
        """The Node as last read, None before the first read."""
        ...

    def read_ahead(self) -> Mapping[str, Any]:
        """The Node for this cycle, read early; raises :class:`~gfd.base.errors.SinkError`."""
        ...


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


def condition_removal(node: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The JSON Patch (for ``nodes/<node>/status``) that removes the ``GPUHealthy`` entry
    from the Node read as ``node``, or None when it has none (``gfd cleanup``). The entry
    is tested by its position and type first: when the list moved since the read, the
    patch fails (422) instead of removing another condition."""
    status = node.get("status") if isinstance(node, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    for index, condition in enumerate(conditions):
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_TYPE:
            path = f"/status/conditions/{index}"
            return [
                {"op": "test", "path": f"{path}/type", "value": CONDITION_TYPE},
                {"op": "remove", "path": path},
            ]
    return None


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
        "message": shorten(message, MAX_MESSAGE),
        "type": "Normal" if state.healthy else "Warning",
        "source": {"component": COMPONENT, "host": node_name},
        "reportingComponent": COMPONENT,
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def node_reader(sink: NodeSource) -> Callable[[], Mapping[str, Any] | None]:
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
        node_sink: NodeSource,
        stop: threading.Event,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        from gfd.kube_api import path_segment

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
        from gfd.kube_api import STRATEGIC_MERGE_PATCH

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
            "node condition updated",
            node=self.node_name,
            condition=CONDITION_TYPE,
            status=state.status,
            reason=state.reason,
        )

    def _record(self, transition: Transition) -> None:
        from gfd.kube_api import JSON

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
