"""The node sink: gfd labels its own Node object directly, safely beside other writers.

This module owns the ownership rules and the diff. gfd records the label keys it
set in the annotation ``nvidia.com/gfd.labels`` (sorted, comma-separated) and, on
every cycle:

* sets the labels it publishes whose value differs on the node;
* removes only keys listed in its ownership annotation that it no longer publishes,
  and of those only keys gfd itself can produce (its ``nvidia.com/`` families,
  :func:`gfd.labels.families.gfd_can_produce`): anyone able to edit the annotation
  could otherwise make gfd delete arbitrary labels. Other keys listed there are
  ignored, reported once, and dropped from the annotation when gfd rewrites it;
* never touches a key that node-feature-discovery owns (listed in NFD's
  ``nfd.node.kubernetes.io/feature-labels``, NFD's default prefix stripped): such a
  key is skipped, and reported once;
* adopts, on a first run, a key it publishes that some earlier writer left on the
  node (unless NFD owns it): from then on gfd owns it;
* writes its annotations (:data:`OWNED_ANNOTATIONS`: the topology matrix and,
  optionally, the timestamp) by the same rules: gfd owns exactly that fixed set and
  removes one from the node when it stops publishing it.

A cycle reads the node once (``resourceVersion=0``, served from the API server's
cache, raw JSON) and writes nothing when nothing differs. A write is one JSON merge
patch; when it removes anything, or rewrites the ownership annotation, it carries the
read ``resourceVersion`` as a precondition, so a stale read can never delete a key
another writer just set, nor disown a key gfd itself set a moment ago (the API
server's cache lags a write briefly): the API server answers 409, and the sink reads
the node again (from etcd this time), recomputes the diff and tries again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gfd.errors import SinkError, SinkPermanentError, echo
from gfd.labels.core import TIMESTAMP_KEY
from gfd.labels.families import gfd_can_produce
from gfd.logs import get_logger
from gfd.sinks import Publication
from gfd.sinks.kube import MERGE_PATCH, KubeApiPermanentError, KubeClient, path_segment
from gfd.topology.render import ANNOTATION_KEY

log = get_logger()

OWNERSHIP_ANNOTATION = "nvidia.com/gfd.labels"
NFD_OWNERSHIP_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
NFD_DEFAULT_PREFIX = "feature.node.kubernetes.io/"
TOPOLOGY_ANNOTATION = ANNOTATION_KEY
#: The node annotations gfd owns, besides its ownership annotation.
OWNED_ANNOTATIONS = frozenset({TOPOLOGY_ANNOTATION, TIMESTAMP_KEY})
#: The API server's limit on the total size of an object's annotations.
ANNOTATIONS_SIZE_LIMIT = 256 * 1024
#: How many 409 conflicts one publish absorbs before it reports an error.
MAX_CONFLICTS = 5


def parse_key_list(value: str | None) -> frozenset[str]:
    """Keys of a comma-separated ownership annotation (empty entries ignored)."""
    if not value:
        return frozenset()
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def nfd_owned_keys(annotations: Mapping[str, str]) -> frozenset[str]:
    """Full label keys NFD owns on a node, from its ``feature-labels`` annotation.

    NFD lists keys in its default namespace without the prefix; keys in any other
    namespace (``nvidia.com/...``) appear in full.
    """
    keys = parse_key_list(annotations.get(NFD_OWNERSHIP_ANNOTATION))
    return frozenset(key if "/" in key else NFD_DEFAULT_PREFIX + key for key in keys)


@dataclass(frozen=True)
class NodeUpdate:
    """What one cycle must change on the node. Empty when the node already matches."""

    set_labels: Mapping[str, str] = field(default_factory=dict)
    remove_labels: frozenset[str] = frozenset()
    set_annotations: Mapping[str, str] = field(default_factory=dict)
    remove_annotations: frozenset[str] = frozenset()
    #: Keys gfd would publish but NFD owns on this node, so they were left alone.
    skipped_nfd_keys: frozenset[str] = frozenset()
    #: Keys the ownership annotation lists that gfd can never produce: never removed.
    foreign_owned_keys: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not (
            self.set_labels or self.remove_labels or self.set_annotations or self.remove_annotations
        )

    @property
    def removes(self) -> bool:
        return bool(self.remove_labels or self.remove_annotations)

    @property
    def needs_precondition(self) -> bool:
        """Whether the write is only right for the node as read: it removes something,
        or rewrites the ownership annotation (from a stale read, that would disown keys
        gfd set since, and leave them on the node for good)."""
        return self.removes or OWNERSHIP_ANNOTATION in self.set_annotations

    def merge_patch(self, resource_version: str | None) -> dict[str, Any]:
        """The JSON merge patch (RFC 7386) body; ``null`` deletes a key."""
        metadata: dict[str, Any] = {}
        labels: dict[str, str | None] = {**self.set_labels, **dict.fromkeys(self.remove_labels)}
        annotations: dict[str, str | None] = {
            **self.set_annotations,
            **dict.fromkeys(self.remove_annotations),
        }
        if labels:
            metadata["labels"] = labels
        if annotations:
            metadata["annotations"] = annotations
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {"metadata": metadata}


def plan_node_update(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    publication: Publication,
) -> NodeUpdate:
    """Diff the node's current ``labels``/``annotations`` against what gfd publishes.

    Pure: the whole ownership policy of this module lives here.
    """
    nfd_keys = nfd_owned_keys(annotations)
    listed = parse_key_list(annotations.get(OWNERSHIP_ANNOTATION))
    owned_before = frozenset(k for k in listed if gfd_can_produce(k))
    desired = {k: v for k, v in publication.labels.items() if k not in nfd_keys}
    skipped = frozenset(publication.labels) - frozenset(desired)

    set_labels = {k: v for k, v in desired.items() if labels.get(k) != v}
    remove_labels = frozenset(
        k for k in owned_before if k not in desired and k not in nfd_keys and k in labels
    )

    desired_annotations = dict(publication.annotations)
    if desired:
        desired_annotations[OWNERSHIP_ANNOTATION] = ",".join(sorted(desired))
    set_annotations = {k: v for k, v in desired_annotations.items() if annotations.get(k) != v}
    removable = OWNED_ANNOTATIONS | {OWNERSHIP_ANNOTATION}
    remove_annotations = frozenset(
        k for k in removable if k in annotations and k not in desired_annotations
    )
    return NodeUpdate(
        set_labels=set_labels,
        remove_labels=remove_labels,
        set_annotations=set_annotations,
        remove_annotations=remove_annotations,
        skipped_nfd_keys=skipped,
        foreign_owned_keys=listed - owned_before,
    )


class NodeSink:
    """Publishes labels and annotations on the Node named ``node_name``.

    ``stop`` is the agent's shutdown event: backoff waits end as soon as it is set.
    With ``timestamp_annotation`` a ``nvidia.com/gfd.timestamp`` label that reaches
    this sink is published as an annotation instead, so restarts do not relabel the
    node and label watchers are not woken by it.
    """

    name = "node"

    def __init__(
        self,
        *,
        client: KubeClient,
        node_name: str,
        stop: threading.Event,
        timestamp_annotation: bool = False,
        max_conflicts: int = MAX_CONFLICTS,
    ) -> None:
        if not node_name:
            raise SinkPermanentError(
                "node sink: no node name; set --node-name or NODE_NAME (downward API spec.nodeName)"
            )
        self._client = client
        self.node_name = node_name
        self._stop = stop
        self._timestamp_annotation = timestamp_annotation
        self._max_conflicts = max_conflicts
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
        deadline = self._client.deadline()
        cached_read = True
        for _ in range(self._max_conflicts + 1):
            node, self._prefetched = self._prefetched, None
            if node is None or not cached_read:
                node = self._read(deadline, cached=cached_read)
            metadata = node.get("metadata") or {}
            labels = metadata.get("labels") or {}
            annotations = metadata.get("annotations") or {}
            update = plan_node_update(labels, annotations, publication)
            self._report_skipped(update.skipped_nfd_keys)
            self._report_foreign(update.foreign_owned_keys)
            if update.empty:
                return False
            self._check_annotation_size(annotations, update)
            precondition = metadata.get("resourceVersion") if update.needs_precondition else None
            response = self._client.request(
                "PATCH",
                self._path,
                stop=self._stop,
                deadline=deadline,
                body=update.merge_patch(precondition),
                content_type=MERGE_PATCH,
                accept_statuses=(409,),
            )
            if response.status != 409:
                log.info(
                    "node_labels_updated",
                    node=self.node_name,
                    set=sorted(update.set_labels),
                    removed=sorted(update.remove_labels),
                    annotations_set=sorted(update.set_annotations),
                    annotations_removed=sorted(update.remove_annotations),
                )
                return True
            # Someone wrote the node since we read it: read it again from etcd, not
            # the cache, and recompute the diff.
            log.info("node_update_conflict", node=self.node_name)
            cached_read = False
            if self._stop.is_set():
                raise SinkError(f"node {self.node_name}: interrupted while resolving a conflict")
        raise SinkError(
            f"node {self.node_name}: still conflicting after {self._max_conflicts} attempts; "
            "another writer keeps changing the node"
        )

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
                "node_labels_owned_by_nfd",
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
                "node_ownership_annotation_lists_foreign_keys",
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
