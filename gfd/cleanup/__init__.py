"""``gfd cleanup``: take off the Nodes what gfd's node sink put there, for an uninstall.

This module owns cleaning one Node, or every Node, of exactly what gfd owns there, by the
rules that wrote it:

* the labels and annotations: the node sink publishing nothing
  (:class:`gfd.sinks.node.NodeSink` with an empty :class:`~gfd.sinks.Publication`), so its
  ownership rules decide (:func:`gfd.sinks.node_update.plan_node_update`): only the keys
  listed in ``nvidia.com/gfd.labels`` that gfd can produce, never one NFD lists as its own,
  then gfd's annotations (that list, the topology matrix, the timestamp); conditional on
  the Node as read, conflicts retried;
* gfd's health taint and its record ``nvidia.com/gfd.taints``, by the taint writer's plan
  (:meth:`gfd.health.taint.NodeTaintWriter.remove_own`): a taint under gfd's key that gfd
  did not add stays;
* the ``GPUHealthy`` condition: one JSON Patch on the status subresource that tests the
  entry's position and type (:func:`gfd.health.condition.condition_removal`); a list that
  moved meanwhile fails the test, and the Node is read again.

Run at an uninstall, the cleanup first waits until gfd's agents are gone
(:func:`wait_for_pods_gone`): one still running would label its node again at its next
cycle. A Node gfd never wrote costs one read and no write; a second cleanup writes nothing. What
lives elsewhere is not touched: the feature file on each node's disk (NFD keeps its labels
until the file goes) and the NodeFeature objects (the garbage collector deletes them with
gfd's DaemonSet); docs/deploy.md, "Uninstalling", says how to remove each.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from gfd.base.errors import GfdError, SinkError
from gfd.base.frozen import frozen_dataclass
from gfd.base.logs import get_logger
from gfd.health.condition import CONDITION_TYPE, condition_removal
from gfd.health.taint import NodeTaintWriter
from gfd.kube_api import JSON_PATCH, KubeApiPermanentError, KubeClient, path_segment
from gfd.sinks import Publication
from gfd.sinks.node import NodeSink
from gfd.sinks.node_update import plan_node_update

log = get_logger()

#: Nodes asked for per page of the list (the API server's chunking).
LIST_PAGE = 500
#: How long :func:`wait_for_pods_gone` waits by default, and how often it asks: a
#: DaemonSet's pods end within their grace period (gfd's own stop takes a second).
PODS_GONE_TIMEOUT = 120.0
PODS_POLL_INTERVAL = 1.0


class CleanupFailed(GfdError):
    """Some Nodes could not be cleaned; the message names the first and why."""


@frozen_dataclass
class NodeCleanup:
    """What was taken off one Node."""

    node: str
    labels: tuple[str, ...] = ()
    annotations: tuple[str, ...] = ()
    taint: str | None = None
    condition: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.labels or self.annotations or self.taint or self.condition)

    def describe(self) -> str:
        """One line for the log of the run (a Job's, at uninstall)."""
        if not self.changed:
            return f"{self.node}: nothing of gfd's"
        parts = []
        if self.labels:
            parts.append(_counted(len(self.labels), "label"))
        if self.annotations:
            parts.append(
                f"{_counted(len(self.annotations), 'annotation')} ({', '.join(self.annotations)})"
            )
        if self.taint:
            parts.append(f"the taint {self.taint}")
        if self.condition:
            parts.append(f"the {CONDITION_TYPE} condition")
        return f"{self.node}: removed " + "; ".join(parts)


@frozen_dataclass
class CleanupReport:
    """Every Node a cleanup went through: what each lost, and which failed and why."""

    cleaned: tuple[NodeCleanup, ...]
    failed: tuple[tuple[str, str], ...]

    def lines(self) -> list[str]:
        changed = sum(1 for result in self.cleaned if result.changed)
        total = len(self.cleaned) + len(self.failed)
        summary = (
            f"cleanup: {_counted(total, 'node')}, {changed} cleaned, "
            f"{len(self.cleaned) - changed} with nothing of gfd's"
        )
        if self.failed:
            summary += f", {len(self.failed)} failed"
        return [result.describe() for result in self.cleaned] + [summary]

    def check(self) -> None:
        """Raise :class:`CleanupFailed` naming the failures, if any."""
        if self.failed:
            node, reason = self.failed[0]
            more = f" (and {len(self.failed) - 1} more, in the log)" if len(self.failed) > 1 else ""
            raise CleanupFailed(
                f"cleanup: {len(self.failed)} of {len(self.failed) + len(self.cleaned)} nodes "
                f"failed; {node}: {reason}{more}"
            )


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def wait_for_pods_gone(
    client: KubeClient,
    namespace: str,
    selector: str,
    stop: threading.Event,
    *,
    timeout: float = PODS_GONE_TIMEOUT,
    poll_interval: float = PODS_POLL_INTERVAL,
) -> None:
    """Return once no Pod in ``namespace`` matches the label ``selector`` (gfd's agents,
    being uninstalled); raise :class:`CleanupFailed` after ``timeout`` seconds."""
    path = f"/api/v1/namespaces/{path_segment(namespace)}/pods"
    started = client.clock()
    while True:
        response = client.request(
            "GET",
            path,
            stop=stop,
            deadline=client.deadline(),
            query={"labelSelector": selector, "limit": str(LIST_PAGE)},
        )
        pods = response.json_object(f"the pods in {namespace}").get("items") or []
        if not pods:
            return
        waited = client.clock() - started
        if waited + poll_interval > timeout:
            names = sorted(
                str((pod.get("metadata") or {}).get("name"))
                for pod in pods
                if isinstance(pod, dict)
            )
            raise CleanupFailed(
                f"cleanup: {_counted(len(pods), 'pod')} matching {selector} in {namespace} "
                f"still there after {waited:.0f}s ({', '.join(names[:3])}); gfd's agents "
                "could label again: delete them first, then run the cleanup"
            )
        log.info("waiting for pods", namespace=namespace, selector=selector, pods=len(pods))
        if stop.wait(poll_interval):
            raise CleanupFailed("cleanup: interrupted while waiting for gfd's pods to go")


def node_names(client: KubeClient, stop: threading.Event) -> list[str]:
    """Every Node's name, sorted, read a page at a time."""
    names: list[str] = []
    token = ""
    while True:
        query = {"limit": str(LIST_PAGE)}
        if token:
            query["continue"] = token
        response = client.request(
            "GET", "/api/v1/nodes", stop=stop, deadline=client.deadline(), query=query
        )
        listing = response.json_object("the list of nodes")
        for item in listing.get("items") or []:
            name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name:
                names.append(name)
        metadata = listing.get("metadata") or {}
        token = str(metadata.get("continue") or "") if isinstance(metadata, dict) else ""
        if not token:
            return sorted(names)


def clean_node(client: KubeClient, node_name: str, stop: threading.Event) -> NodeCleanup:
    """Take gfd's labels, annotations, taint and condition off the Node ``node_name``.

    Raises :class:`~gfd.base.errors.SinkError` when a read or a write fails; what was removed
    before stays removed, and a rerun goes on from there.
    """
    sink = NodeSink(client=client, node_name=node_name, stop=stop)
    node = sink.read_ahead()
    metadata = node.get("metadata") or {}
    owned = plan_node_update(
        metadata.get("labels") or {}, metadata.get("annotations") or {}, Publication({})
    )
    sink.publish(Publication({}))
    taints = NodeTaintWriter(client=client, node_sink=sink, stop=stop, effect=None)
    taint = taints.remove_own(_read_fresh(client, node_name, stop))
    condition = _remove_condition(client, node_name, stop)
    result = NodeCleanup(
        node=node_name,
        labels=tuple(sorted(owned.remove_labels)),
        annotations=tuple(sorted(owned.remove_annotations)),
        taint=str(taint) if taint is not None else None,
        condition=condition,
    )
    if result.changed:
        log.info(
            "node cleaned",
            node=node_name,
            labels=list(result.labels),
            annotations=list(result.annotations),
            taint=result.taint,
            condition=condition,
        )
    return result


def clean_nodes(client: KubeClient, names: Sequence[str], stop: threading.Event) -> CleanupReport:
    """Clean each Node of ``names`` in turn; one that fails does not stop the next."""
    cleaned: list[NodeCleanup] = []
    failed: list[tuple[str, str]] = []
    for name in names:
        try:
            cleaned.append(clean_node(client, name, stop))
        except SinkError as exc:
            if _not_found(exc):
                # Deleted since the list: nothing of gfd's is left on it.
                log.info("node gone", node=name)
                continue
            log.warning("node cleanup failed", node=name, reason=str(exc))
            failed.append((name, str(exc)))
    return CleanupReport(tuple(cleaned), tuple(failed))


def _not_found(exc: BaseException | None) -> bool:
    """The Node answered 404 (the node sink words it as a problem of --node-name)."""
    while exc is not None:
        if isinstance(exc, KubeApiPermanentError) and exc.status == 404:
            return True
        exc = exc.__cause__
    return False


def _read_fresh(client: KubeClient, node_name: str, stop: threading.Event) -> dict[str, Any]:
    """The Node from etcd: the writes before this one changed it."""
    response = client.request("GET", _node_path(node_name), stop=stop, deadline=client.deadline())
    return response.json_object(f"node {node_name}")


def _remove_condition(client: KubeClient, node_name: str, stop: threading.Event) -> bool:
    """Remove the ``GPUHealthy`` condition; True when it was there. A failed ``test`` (the
    conditions moved since the read) reads the Node again and retries, backing off, until
    the client's deadline."""
    deadline = client.deadline()
    attempts = 0
    while True:
        patch = condition_removal(_read_fresh(client, node_name, stop))
        if patch is None:
            return attempts > 0
        attempts += 1
        response = client.request(
            "PATCH",
            f"{_node_path(node_name)}/status",
            stop=stop,
            deadline=deadline,
            body=patch,
            content_type=JSON_PATCH,
            accept_statuses=(422,),
        )
        if response.status < 300:
            return True
        delay = client.conflict_delay(attempts)
        if client.clock() + delay > deadline:
            raise KubeApiPermanentError(
                "PATCH",
                f"{_node_path(node_name)}/status",
                response.status,
                f"the {CONDITION_TYPE} condition kept moving after {attempts} attempts",
            )
        if stop.wait(delay):
            raise SinkError(f"node {node_name}: interrupted while removing the condition")


def _node_path(node_name: str) -> str:
    return f"/api/v1/nodes/{path_segment(node_name)}"
