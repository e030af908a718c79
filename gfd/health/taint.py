"""gfd's health taint: ``nvidia.com/gpu.health=<reason>:<effect>`` on its Node while the
node's GPUs are unhealthy (``--health-taint``), and an Event per change of it.

This module owns the taint end to end: which taint the reported state asks for
(:func:`wanted_taint`), gfd's ownership of it, the plan from the Node as read
(:func:`plan_taint`), the guarded write, and its Event. :class:`HealthOutputs` hands the
state to the condition writer and the taint writer in turn.

Ownership, as for labels (:mod:`gfd.sinks.node`): gfd records the taint it added in the
annotation ``nvidia.com/gfd.taints`` (``<key>:<effect>``), written in the same patch as the
taint, and only ever changes or removes the taint that record names. While a taint under
gfd's key that gfd did not add is on the Node (an admin's, say), gfd leaves the key
alone: it adds none beside it, changes none, removes none (the admission policy admits
one taint under the key, and the node is tainted already). Any other taint is never
touched: the write replaces the taints list as read with that list, gfd's entry alone
added, changed or removed.

When: the taint follows the reported :class:`~gfd.health.condition.HealthState`. Unhealthy:
gfd's taint with the state's reason as value and the configured effect. Healthy, or the
option off: no taint of gfd's, so one it owns goes on the next cycle (turning the option
off clears it too). Nothing is read for it: the Node is the node sink's read of the cycle
(``saw``), or in a cycle without one (the GPU read failed: a GPU lost, say) the last Node
seen or written, whose staleness the guarded write catches; only a process that must taint
before it ever saw its Node (its first read of the GPUs failed) reads the Node for it. A
cycle whose Node already matches makes no request.

The write is one JSON Patch (RFC 6902) whose ``test`` operations hold what the plan read,
``spec.taints`` and the ownership record, then sets both. Another writer's change to either
in between fails the patch (422), and the writer reads the Node again, from etcd, and plans
again, backing off, until the client's deadline; a change of anything else (labels,
status, the kubelet's heartbeat) cannot make it fail. A 422 after which a fresh read shows
everything tested still holding is the API server refusing the change itself (the
admission policy, say): reported, not repeated. Failures are logged, never raised: the
next cycle tries again, because the Node still differs.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from gfd.base.errors import SinkError, shorten
from gfd.base.frozen import frozen_dataclass
from gfd.base.logs import get_logger
from gfd.health.condition import (
    EVENT_NAMESPACE,
    MAX_MESSAGE,
    ConditionWriter,
    HealthState,
    NodeSource,
    Transition,
    event_body,
)

if TYPE_CHECKING:
    from gfd.kube_api import KubeClient

log = get_logger()

TAINT_KEY = "nvidia.com/gpu.health"
#: gfd's record of the taint it added: ``<key>:<effect>``.
TAINT_OWNERSHIP_ANNOTATION = "nvidia.com/gfd.taints"
TAINT_EFFECTS = ("NoSchedule", "NoExecute")

#: The Event reasons of a change of the taint.
TAINT_ADDED = "HealthTaintAdded"
TAINT_CHANGED = "HealthTaintChanged"
TAINT_REMOVED = "HealthTaintRemoved"

#: Values a JSON Patch ``test`` compares alike on both sides: kube-apiserver compares a
#: tested string by its bytes as Go encodes them (``<``, ``>`` and ``&`` escaped, non-ASCII
#: as UTF-8), so a record holding anything else is guarded by the resourceVersion instead.
_PLAIN = re.compile(r"[\x20-\x25\x27-\x3b\x3d\x3f-\x7e]*")


@frozen_dataclass
class Taint:
    key: str
    value: str
    effect: str

    def body(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


def wanted_taint(state: HealthState, effect: str | None) -> Taint | None:
    """gfd's taint for ``state``, with ``effect`` (None: the option is off): none when healthy."""
    if effect is None or state.healthy:
        return None
    return Taint(TAINT_KEY, state.reason, effect)


def owned_effect(annotations: Mapping[str, Any]) -> str | None:
    """The effect of the taint gfd recorded as its own, or None (no record, or not one of
    gfd's: anyone who can edit the annotation could otherwise make gfd drop any taint)."""
    record = annotations.get(TAINT_OWNERSHIP_ANNOTATION)
    if not isinstance(record, str):
        return None
    key, _, effect = record.rpartition(":")
    return effect if key == TAINT_KEY and effect in TAINT_EFFECTS else None


def _as_taint(entry: Any) -> Taint | None:
    if not isinstance(entry, Mapping):
        return None
    key, value, effect = (entry.get(k) for k in ("key", "value", "effect"))
    if not isinstance(key, str) or not isinstance(effect, str):
        return None
    return Taint(key, value if isinstance(value, str) else "", effect)


@frozen_dataclass
class TaintPlan:
    """What one cycle must change of the Node's taints and gfd's record, from a read of it.

    ``change`` is None when nothing must change; ``taints`` and ``record`` are the list and
    the record to write (``record`` None: remove it). ``read_taints`` and ``read_record``
    are what the plan read (None: absent), which the write tests.
    """

    change: str | None
    taints: list[Any] = field(default_factory=list)
    record: str | None = None
    read_taints: list[Any] | None = None
    read_record: str | None = None
    had_annotations: bool = True
    #: The Node's resourceVersion as read: guarded instead of a record a ``test`` cannot
    #: compare reliably (:attr:`guards_version`).
    read_version: str | None = None
    #: The taint gfd had, and the one it will have (None: none).
    before: Taint | None = None
    after: Taint | None = None
    #: A taint under gfd's key gfd did not add: gfd leaves the key alone.
    foreign: Taint | None = None

    @property
    def guards_version(self) -> bool:
        """The record holds a value a ``test`` cannot compare reliably (:data:`_PLAIN`):
        the write is guarded by the resourceVersion as read instead."""
        return self.read_record is not None and not _PLAIN.fullmatch(self.read_record)

    def operations(self) -> list[dict[str, Any]]:
        """The JSON Patch: tests of what was read, then the writes."""
        record_path = "/metadata/annotations/" + TAINT_OWNERSHIP_ANNOTATION.replace("/", "~1")
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/spec/taints", "value": self.read_taints}
        ]
        if not self.had_annotations:
            ops.append({"op": "test", "path": "/metadata/annotations", "value": None})
        elif not self.guards_version:
            ops.append({"op": "test", "path": record_path, "value": self.read_record})
        else:
            ops.append(
                {"op": "test", "path": "/metadata/resourceVersion", "value": self.read_version}
            )
        if self.taints and self.taints != self.read_taints:
            ops.append({"op": "add", "path": "/spec/taints", "value": self.taints})
        elif not self.taints and self.read_taints is not None:
            ops.append({"op": "remove", "path": "/spec/taints"})
        if self.record is not None and self.had_annotations:
            ops.append({"op": "add", "path": record_path, "value": self.record})
        elif self.record is not None:
            value = {TAINT_OWNERSHIP_ANNOTATION: self.record}
            ops.append({"op": "add", "path": "/metadata/annotations", "value": value})
        elif self.read_record is not None:
            ops.append({"op": "remove", "path": record_path})
        return ops

    def still_holds(self, node: Mapping[str, Any]) -> bool:
        """Whether ``node`` (a fresh read) still has what this plan read and tested."""
        again = _read(node)
        held = (again.read_taints, again.read_record, again.had_annotations) == (
            self.read_taints,
            self.read_record,
            self.had_annotations,
        )
        return held and (not self.guards_version or again.read_version == self.read_version)


def _read(node: Mapping[str, Any]) -> TaintPlan:
    """The empty plan of ``node``: what a plan reads of it, and changes nothing."""
    spec = node.get("spec")
    listed = spec.get("taints") if isinstance(spec, Mapping) else None
    metadata = node.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    record = (
        annotations.get(TAINT_OWNERSHIP_ANNOTATION) if isinstance(annotations, Mapping) else None
    )
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return TaintPlan(
        None,
        read_taints=list(listed) if isinstance(listed, list) else None,
        read_record=record if isinstance(record, str) else None,
        had_annotations=isinstance(annotations, Mapping),
        read_version=version if isinstance(version, str) else None,
    )


def plan_taint(node: Mapping[str, Any], wanted: Taint | None) -> TaintPlan:
    """The change that makes ``node`` carry ``wanted`` as gfd's taint (None: no taint of gfd's).

    Pure: the whole ownership policy of this module lives here.
    """
    read = _read(node)
    taints = list(read.read_taints or [])
    effect = owned_effect({TAINT_OWNERSHIP_ANNOTATION: read.read_record})
    mine_at: int | None = None
    foreign: Taint | None = None
    for position, entry in enumerate(taints):
        taint = _as_taint(entry)
        if taint is None or taint.key != TAINT_KEY:
            continue
        if taint.effect == effect and mine_at is None:
            mine_at = position
        elif foreign is None:
            foreign = taint
    before = _as_taint(taints[mine_at]) if mine_at is not None else None
    read = replace(read, before=before, after=before, taints=list(taints), record=read.read_record)
    if foreign is not None:
        return replace(read, foreign=foreign)
    if wanted is not None:
        if before == wanted:
            return read
        if mine_at is not None:
            taints[mine_at] = wanted.body()
        else:
            taints.append(wanted.body())
        change = "changed" if mine_at is not None else "added"
        record = f"{wanted.key}:{wanted.effect}"
        return replace(read, change=change, taints=taints, record=record, after=wanted)
    if mine_at is not None:
        del taints[mine_at]
        return replace(read, change="removed", taints=taints, record=None, after=None)
    if effect is not None:
        # gfd's record outlived its taint (someone removed it): drop the record, quietly.
        return replace(read, change="disowned", record=None)
    return read


class HealthOutputs:
    """The health state's writers together (the condition, the taint): each sees the
    Node and writes the state, in turn; one that fails does not stop the next."""

    def __init__(self, writers: Sequence[ConditionWriter]) -> None:
        self.writers = tuple(writers)

    def saw(self, node: Mapping[str, Any]) -> None:
        for writer in self.writers:
            writer.saw(node)

    def write(self, state: HealthState, transition: Transition | None) -> None:
        for writer in self.writers:
            writer.write(state, transition)


class NodeTaintWriter:
    """Keeps gfd's taint on ``node_sink``'s Node as the health state asks.

    ``effect``: the taint's effect, None when ``--health-taint`` is off (a taint gfd owns
    is then removed, and nothing else is done).
    """

    def __init__(
        self,
        *,
        client: KubeClient,
        node_sink: NodeSource,
        stop: threading.Event,
        effect: str | None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        from gfd.kube_api import path_segment

        if effect is not None and effect not in TAINT_EFFECTS:
            raise ValueError(f"a health taint's effect is one of {', '.join(TAINT_EFFECTS)}")
        self._client = client
        self._sink = node_sink
        self.node_name = node_sink.node_name
        self._stop = stop
        self.effect = effect
        self._wall_clock = wall_clock
        self._path = f"/api/v1/nodes/{path_segment(self.node_name)}"
        self._events_path = f"/api/v1/namespaces/{EVENT_NAMESPACE}/events"
        self._node: Mapping[str, Any] | None = None
        self._reported: set[str] = set()

    def saw(self, node: Mapping[str, Any]) -> None:
        self._node = node

    def write(self, state: HealthState, transition: Transition | None) -> None:
        wanted = wanted_taint(state, self.effect)
        if self._node is None and wanted is None:
            # Never seen the Node and nothing to add: a taint of gfd's from an earlier run
            # goes once the Node is seen.
            return
        try:
            node = self._node or self._read_fresh(self._client.deadline())
            plan = self._apply(node, wanted)
        except SinkError as exc:
            self._report_failure("node taint not written", exc)
            return
        if plan is not None and plan.change in ("added", "changed", "removed"):
            self._record(plan, state)

    def remove_own(self, node: Mapping[str, Any]) -> Taint | None:
        """Remove gfd's taint and its record from the Node read as ``node`` (``gfd
        cleanup``, for an uninstall): the same plan and guarded write as a healthy cycle's,
        but no Event. Returns the taint removed (None: gfd had none there; a record that
        outlived its taint is dropped all the same). Raises :class:`~gfd.base.errors.SinkError`."""
        self._node = node
        plan = self._apply(node, None)
        return plan.before if plan is not None else None

    def _apply(self, node: Mapping[str, Any], wanted: Taint | None) -> TaintPlan | None:
        """Write the plan for ``node``, re-reading and re-planning after a lost race;
        returns the plan written (None: nothing to write)."""
        from gfd.kube_api import JSON_PATCH, KubeApiPermanentError, status_message

        deadline = self._client.deadline()
        started = self._client.clock()
        attempts = 0
        while True:
            plan = plan_taint(node, wanted)
            if plan.foreign is not None:
                self._report_once(
                    f"foreign:{plan.foreign}",
                    "node taint left alone",
                    taint=str(plan.foreign),
                    reason=f"a taint under {TAINT_KEY} that gfd did not add is on the node; "
                    "gfd adds, changes and removes none under that key while it is there",
                )
            if plan.change is None:
                return None
            attempts += 1
            response = self._client.request(
                "PATCH",
                self._path,
                stop=self._stop,
                deadline=deadline,
                body=plan.operations(),
                content_type=JSON_PATCH,
                accept_statuses=(409, 422),
            )
            if response.status < 300:
                # The Node as written: the plan of a cycle without a read starts from it.
                self._node = response.json_object(f"node {self.node_name}")
                log.info(
                    "node taint updated",
                    node=self.node_name,
                    change=plan.change,
                    taint=str(plan.after or plan.before or TAINT_KEY),
                    attempts=attempts,
                )
                return plan
            fresh = self._read_fresh(deadline)
            if plan.still_holds(fresh):
                raise KubeApiPermanentError(
                    "PATCH",
                    self._path,
                    response.status,
                    f"{status_message(response.body)} (what the patch tested still holds "
                    "on the node, so the change itself was refused)",
                )
            log.info(
                "node taint conflict",
                node=self.node_name,
                status=response.status,
                attempt=attempts,
                reason="the node's taints or gfd's record changed since they were read",
            )
            delay = self._client.conflict_delay(attempts)
            now = self._client.clock()
            if now + delay > deadline:
                raise SinkError(
                    f"node {self.node_name}: taints still changing after {attempts} attempts "
                    f"in {now - started:.1f}s; another writer keeps changing them"
                )
            if self._stop.wait(delay):
                raise SinkError(f"node {self.node_name}: interrupted while writing the taint")
            node = self._node = fresh

    def _read_fresh(self, deadline: float) -> Mapping[str, Any]:
        """The Node from etcd (not the API server's cache, which may lag)."""
        response = self._client.request("GET", self._path, stop=self._stop, deadline=deadline)
        return response.json_object(f"node {self.node_name}")

    def _record(self, plan: TaintPlan, state: HealthState) -> None:
        """The Event of a change of the taint, shaped as the condition's Events."""
        from gfd.kube_api import JSON

        now = self._wall_clock()
        body = event_body(
            Transition(None, state), node=self._sink.last_node, node_name=self.node_name, now=now
        )
        # Its own name: the condition's Event of the same cycle may carry the same time.
        body["metadata"]["name"] = f"{self.node_name}.{int(now * 1e9):x}.taint"
        if plan.change == "removed":
            reason, kind = TAINT_REMOVED, "Normal"
            text = f"gfd removed its taint {plan.before}: {state.message}"
        else:
            reason, kind = (TAINT_ADDED if plan.change == "added" else TAINT_CHANGED), "Warning"
            was = f" (was {plan.before})" if plan.before is not None else ""
            text = f"gfd tainted the node {plan.after}{was}: {state.message}"
        body.update(reason=reason, type=kind, message=shorten(text, MAX_MESSAGE))
        try:
            self._client.request(
                "POST",
                self._events_path,
                stop=self._stop,
                deadline=self._client.deadline(),
                body=body,
                content_type=JSON,
            )
        except SinkError as exc:
            self._report_failure("node taint event not recorded", exc)

    def _report_once(self, key: str, event: str, **fields: Any) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        log.warning(event, node=self.node_name, **fields)

    def _report_failure(self, event: str, exc: SinkError) -> None:
        # Once per distinct reason at warning level: a missing RBAC rule must not flood.
        reason = str(exc)
        if f"{event}: {reason}" in self._reported:
            log.debug(event, node=self.node_name, reason=reason)
            return
        self._report_once(f"{event}: {reason}", event, reason=reason)
