"""The node sink: gfd labels its own Node object directly, safely beside other writers.

This module owns the node's reads and writes; what a cycle must change, by the
ownership rules (gfd removes only keys it listed as its own and can produce, never
touches NFD's, adopts what it publishes), is the pure diff of
:mod:`gfd.sinks.node_update`.

A cycle reads the node once (``resourceVersion=0``, served from the API server's
cache, raw JSON) and writes nothing when nothing differs. A write that only sets values
is one JSON merge patch without a precondition: it cannot delete or disown anyone's key.
A write that removes anything, or rewrites the ownership annotation, is only right for
the node as read, so it is conditional, and never on more than it depends on:

* first, a JSON merge patch carrying the read ``resourceVersion`` (on a quiet node, the
  usual case, that is the only write, and any server or mock understands it);
* once the API server has answered 409 (the node changed since the read: a busy node, or
  the cached read was stale), the sink reads the node from etcd and sends a JSON Patch
  (RFC 6902) whose ``test`` operations hold exactly what the write depends on
  (:attr:`~gfd.sinks.node_update.NodeUpdate.depends_on`: the ownership annotation,
  NFD's annotation, each label it removes, each listed key it drops as absent), so the
  kubelet's status, another controller's label or any other unrelated change can no
  longer make it fail. A failed ``test`` answers 422; the sink reads the node again,
  and when what it tested still holds the 422 was the server refusing the change
  itself (an invalid label): reported.

A stale read can therefore never delete a key another writer just set, nor disown a key
gfd itself set a moment ago (the API server's cache lags a write briefly). Conflicts are
retried with jittered backoff (:meth:`gfd.kube_api.KubeClient.conflict_delay`) until the
publish's deadline, not for a fixed number of tries.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from gfd.base.errors import SinkError, SinkPermanentError, echo
from gfd.base.logs import get_logger
from gfd.kube_api import (
    JSON_PATCH,
    MERGE_PATCH,
    KubeApiPermanentError,
    KubeClient,
    KubeResponse,
    path_segment,
    status_message,
)
from gfd.labels.core import TIMESTAMP_KEY
from gfd.sinks import Publication

# The keys gfd owns on a node, importable from the sink that writes them.
from gfd.sinks.node_update import NFD_OWNERSHIP_ANNOTATION as NFD_OWNERSHIP_ANNOTATION
from gfd.sinks.node_update import OWNED_ANNOTATIONS as OWNED_ANNOTATIONS
from gfd.sinks.node_update import OWNERSHIP_ANNOTATION as OWNERSHIP_ANNOTATION
from gfd.sinks.node_update import TOPOLOGY_ANNOTATION as TOPOLOGY_ANNOTATION
from gfd.sinks.node_update import GuardedPatch, NodeUpdate, plan_node_update

log = get_logger()

#: The API server's limit on the total size of an object's annotations.
ANNOTATIONS_SIZE_LIMIT = 256 * 1024


class NodeSink:
    """Publishes labels and annotations on the Node named ``node_name``.

    ``stop`` is the agent's shutdown event: backoff waits end as soon as it is set.
    With ``timestamp_annotation`` a ``nvidia.com/gfd.timestamp`` label that reaches
    this sink is published as an annotation instead, so restarts do not relabel the
    node and label watchers are not woken by it. With ``dry_run`` every write is a
    server-side dry run (``dryRun=All``): the API server validates and admits it and
    stores nothing (``gfd doctor``).
    """

    name = "node"

    def __init__(
        self,
        *,
        client: KubeClient,
        node_name: str,
        stop: threading.Event,
        timestamp_annotation: bool = False,
        dry_run: bool = False,
    ) -> None:
        if not node_name:
            raise SinkPermanentError(
                "node sink: no node name; set --node-name or NODE_NAME (downward API spec.nodeName)"
            )
        self._client = client
        self.node_name = node_name
        self._stop = stop
        self._timestamp_annotation = timestamp_annotation
        self._dry_run = dry_run
        self._path = f"/api/v1/nodes/{path_segment(node_name)}"
        self._reported_nfd_keys: set[str] = set()
        self._reported_foreign_keys: set[str] = set()
        #: The node as last read (the health checks and the condition writer use it).
        self.last_node: dict[str, Any] | None = None
        self._prefetched: dict[str, Any] | None = None
        self._prefetch_error: SinkError | None = None

    def read_ahead(self) -> dict[str, Any]:
        """Read the node now, for this cycle: the next :meth:`publish` starts from this
        read instead of making its own (or, when it failed, reports its error), so
        reading early costs no request."""
        try:
            node = self._read(self._client.deadline(), cached=True)
        except SinkError as exc:
            # The publish of this cycle reports it, without asking the server again.
            self._prefetch_error = exc
            raise
        self._prefetched = node
        return node

    def publish(self, publication: Publication) -> bool:
        publication = self._check(publication)
        failed, self._prefetch_error = self._prefetch_error, None
        if failed is not None:
            self._prefetched = None
            raise failed
        clock = self._client.clock
        started = clock()
        deadline = self._client.deadline()
        node, self._prefetched = self._prefetched, None
        if node is None:
            node = self._read(deadline, cached=True)
        # After the first lost race the write is guarded key by key (module docstring).
        guarded = False
        attempts = 0
        while True:
            attempts += 1
            metadata = node.get("metadata") or {}
            labels = metadata.get("labels") or {}
            annotations = metadata.get("annotations") or {}
            update = plan_node_update(labels, annotations, publication)
            self._report_skipped(update.skipped_nfd_keys)
            self._report_foreign(update.foreign_owned_keys)
            if update.empty:
                return False
            self._check_annotation_size(annotations, update)
            patch = update.guarded_patch(metadata) if guarded and update.depends_on else None
            response = self._send(update, patch, metadata, deadline)
            if response.status not in (409, 422):
                log.info(
                    "node labels dry run" if self._dry_run else "node labels updated",
                    node=self.node_name,
                    set=sorted(update.set_labels),
                    removed=sorted(update.remove_labels),
                    annotations_set=sorted(update.set_annotations),
                    annotations_removed=sorted(update.remove_annotations),
                    attempts=attempts,
                )
                return True
            fresh: dict[str, Any] | None = None
            if response.status == 409:
                reason = "the node changed since it was read (409 Conflict)"
            else:
                assert patch is not None  # only a guarded patch accepts 422
                fresh = self._read(deadline, cached=False)
                changed = patch.changed(fresh.get("metadata") or {})
                if not changed:
                    # Everything tested still holds: the server refused the change itself.
                    raise KubeApiPermanentError(
                        "PATCH",
                        self._path,
                        422,
                        f"{status_message(response.body)} (what the patch tested still "
                        "holds on the node, so the change itself was refused)",
                    )
                reason = f"changed since it was read: {', '.join(changed[:5])}"
            guarded = True
            log.info(
                "node update conflict",
                node=self.node_name,
                status=response.status,
                attempt=attempts,
                reason=reason,
            )
            self._wait_to_retry(attempts, started, deadline, reason)
            # Read again from etcd, not the cache, which may still lag.
            node = fresh if fresh is not None else self._read(deadline, cached=False)

    def _send(
        self,
        update: NodeUpdate,
        patch: GuardedPatch | None,
        metadata: Mapping[str, Any],
        deadline: float,
    ) -> KubeResponse:
        """One write of ``update``: guarded JSON Patch, merge patch with the read
        resourceVersion, or (when nothing depends on the read) a plain merge patch."""
        if patch is not None:
            body: Any = patch.operations
            content_type = JSON_PATCH
            accept: tuple[int, ...] = (409, 422)
        else:
            version = metadata.get("resourceVersion") if update.needs_precondition else None
            body = update.merge_patch(version)
            content_type = MERGE_PATCH
            accept = (409,)
        return self._client.request(
            "PATCH",
            self._path,
            stop=self._stop,
            deadline=deadline,
            query={"dryRun": "All"} if self._dry_run else None,
            body=body,
            content_type=content_type,
            accept_statuses=accept,
        )

    def _wait_to_retry(self, attempts: int, started: float, deadline: float, reason: str) -> None:
        """Back off before trying a lost race again; give up when the wait would end past
        the publish's deadline, or at once on stop."""
        delay = self._client.conflict_delay(attempts)
        now = self._client.clock()
        if now + delay > deadline:
            raise SinkError(
                f"node {self.node_name}: still conflicting after {attempts} attempts in "
                f"{now - started:.1f}s ({reason}); another writer keeps changing what "
                "gfd's write depends on"
            )
        if self._stop.wait(delay):
            raise SinkError(f"node {self.node_name}: interrupted while resolving a conflict")

    def close(self) -> None:
        """Nothing to release: the KubeClient belongs to the agent, labels stay."""

    def _check(self, publication: Publication) -> Publication:
        unknown = sorted(set(publication.annotations) - OWNED_ANNOTATIONS)
        if unknown:
            raise SinkPermanentError(
                f"node sink: gfd does not own the annotation(s) {', '.join(unknown)}; "
                f"it only writes {', '.join(sorted(OWNED_ANNOTATIONS))}"
            )
        if self._timestamp_annotation and TIMESTAMP_KEY in publication.labels:
            labels = {k: v for k, v in publication.labels.items() if k != TIMESTAMP_KEY}
            annotations = {
                **publication.annotations,
                TIMESTAMP_KEY: publication.labels[TIMESTAMP_KEY],
            }
            return Publication(labels=labels, annotations=annotations)
        return publication

    def _read(self, deadline: float, *, cached: bool) -> dict[str, Any]:
        try:
            response = self._client.request(
                "GET",
                self._path,
                stop=self._stop,
                deadline=deadline,
                query={"resourceVersion": "0"} if cached else None,
            )
        except KubeApiPermanentError as exc:
            if exc.status == 404:
                raise SinkPermanentError(
                    f"node {self.node_name!r} not found; check --node-name/NODE_NAME"
                ) from exc
            raise
        node = response.json_object(f"node {self.node_name}")
        self.last_node = node
        return node

    def _report_skipped(self, keys: Iterable[str]) -> None:
        fresh = sorted(set(keys) - self._reported_nfd_keys)
        if fresh:
            self._reported_nfd_keys.update(fresh)
            log.warning(
                "node labels owned by NFD",
                node=self.node_name,
                keys=fresh,
                reason=f"listed in {NFD_OWNERSHIP_ANNOTATION}; gfd leaves them to NFD",
            )

    def _report_foreign(self, keys: Iterable[str]) -> None:
        fresh = sorted(set(keys) - self._reported_foreign_keys)
        if fresh:
            self._reported_foreign_keys.update(fresh)
            shown = [echo(key) for key in fresh[:10]]
            log.warning(
                "node ownership annotation lists foreign keys",
                node=self.node_name,
                keys=shown,
                count=len(fresh),
                reason=f"{OWNERSHIP_ANNOTATION} lists keys gfd never produces; "
                "they are not removed, and are dropped from the annotation",
            )

    def _check_annotation_size(self, current: Mapping[str, str], update: NodeUpdate) -> None:
        if not update.set_annotations:
            return
        result = {k: v for k, v in current.items() if k not in update.remove_annotations}
        result.update(update.set_annotations)
        size = sum(len(k.encode()) + len(v.encode()) for k, v in result.items())
        if size > ANNOTATIONS_SIZE_LIMIT:
            largest = max(update.set_annotations, key=lambda k: len(update.set_annotations[k]))
            raise SinkPermanentError(
                f"node {self.node_name}: annotations would total {size} bytes, over the "
                f"API server's {ANNOTATIONS_SIZE_LIMIT}-byte limit (largest from gfd: "
                f"{largest}, {len(update.set_annotations[largest])} bytes)"
            )
