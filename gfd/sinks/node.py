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
cache, raw JSON) and writes nothing when nothing differs. A write that only sets values
is one JSON merge patch without a precondition: it cannot delete or disown anyone's key.
A write that removes anything, or rewrites the ownership annotation, is only right for
the node as read, so it is conditional, and never on more than it depends on:

* first, a JSON merge patch carrying the read ``resourceVersion`` (on a quiet node, the
  usual case, that is the only write, and any server or mock understands it);
* once the API server has answered 409 (the node changed since the read: a busy node, or
  the cached read was stale), the sink reads the node from etcd and sends a JSON Patch
  (RFC 6902) whose ``test`` operations hold exactly what the write depends on
  (:attr:`NodeUpdate.depends_on`: the ownership annotation, NFD's annotation, each label
  it removes, each listed key it drops as absent), so the kubelet's status, another
  controller's label or any other unrelated change can no longer make it fail. A failed
  ``test`` answers 422; the sink reads the node again, and when what it tested still
  holds the 422 was the server refusing the change itself (an invalid label): reported.

A stale read can therefore never delete a key another writer just set, nor disown a key
gfd itself set a moment ago (the API server's cache lags a write briefly). Conflicts are
retried with jittered backoff (:meth:`gfd.kube_api.KubeClient.conflict_delay`) until the
publish's deadline, not for a fixed number of tries.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gfd.errors import SinkError, SinkPermanentError, echo
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
from gfd.labels.families import gfd_can_produce
from gfd.logs import get_logger
from gfd.sinks import Publication
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
#: Values a JSON Patch ``test`` can guard. kube-apiserver's JSON Patch library compares
#: the raw JSON bytes of the value as the server encodes the object with those the client
#: sent; Go's encoder escapes ``<``, ``>`` and ``&`` and writes non-ASCII as UTF-8, where
#: Python's does otherwise. Printable ASCII without those three is encoded alike by both.
#: A write whose guards would test any other value (someone edited an annotation) keeps
#: the resourceVersion precondition instead.
_PLAIN_VALUE = re.compile(r"[\x20-\x25\x27-\x3b\x3d\x3f-\x7e]*")


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


def json_pointer(field_name: str, key: str | None = None) -> str:
    """The RFC 6901 pointer to ``metadata.<field_name>`` or to one of its keys."""
    path = f"/metadata/{field_name}"
    if key is None:
        return path
    return f"{path}/{key.replace('~', '~0').replace('/', '~1')}"


@dataclass(frozen=True)
class Guard:
    """One fact a guarded write depends on: ``metadata.<map_name>[key]`` is ``value`` as
    read (None: absent). ``key`` None stands for the whole map, only ever guarded absent."""

    map_name: str
    key: str | None
    value: str | None

    def holds(self, metadata: Mapping[str, Any]) -> bool:
        entries = metadata.get(self.map_name)
        if self.key is None:
            return entries is None
        current = entries.get(self.key) if isinstance(entries, Mapping) else None
        return current == self.value

    def operation(self) -> dict[str, Any]:
        """The JSON Patch ``test``. A ``null`` value tests absence: kube-apiserver's JSON
        Patch library (evanphx/json-patch) lets a null test match a missing key; RFC 6902
        itself has no way to say "absent"."""
        return {"op": "test", "path": json_pointer(self.map_name, self.key), "value": self.value}

    def describe(self) -> str:
        if self.key is None:
            return f"metadata.{self.map_name}"
        return f"{self.map_name.removesuffix('s')} {self.key}"


@dataclass(frozen=True)
class GuardedPatch:
    """A JSON Patch whose ``test`` operations come first, so it applies whole or not at all."""

    operations: list[dict[str, Any]]
    guards: tuple[Guard, ...]
    #: gfd's own annotations it removes: their ``remove`` fails when one is already gone.
    removed_annotations: frozenset[str] = frozenset()

    def changed(self, metadata: Mapping[str, Any]) -> list[str]:
        """What the patch depends on that no longer holds for ``metadata`` (a fresh read);
        empty when the patch would apply to it as it did to the read it was made from."""
        changed = [guard.describe() for guard in self.guards if not guard.holds(metadata)]
        annotations = metadata.get("annotations")
        present = annotations if isinstance(annotations, Mapping) else {}
        changed += [
            f"annotation {key} (gone)"
            for key in sorted(self.removed_annotations)
            if key not in present
        ]
        return changed


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
    #: What a removal or an ownership rewrite depends on, as read: ``(field, key)`` to
    #: its value, None where absent. Empty when the update needs no precondition.
    depends_on: Mapping[tuple[str, str], str | None] = field(default_factory=dict)

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

    def guarded_patch(self, metadata: Mapping[str, Any]) -> GuardedPatch | None:
        """The JSON Patch (RFC 6902) of this update for a node whose metadata was read as
        ``metadata``, conditional on exactly :attr:`depends_on`; None when a guarded
        value is one a ``test`` cannot compare reliably (see :data:`_PLAIN_VALUE`)."""
        if any(v is not None and not _PLAIN_VALUE.fullmatch(v) for v in self.depends_on.values()):
            return None
        present = {
            name: isinstance(metadata.get(name), Mapping) for name in ("labels", "annotations")
        }
        guards: list[Guard] = []
        for (name, key), value in sorted(self.depends_on.items()):
            # In a map that is absent every key is absent: the map's own guard covers it.
            if present[name]:
                guards.append(Guard(name, key, value))
        writes = {
            "labels": (self.set_labels, self.remove_labels),
            "annotations": (self.set_annotations, self.remove_annotations),
        }
        for name, (setting, removing) in writes.items():
            depends = any(dep_name == name for dep_name, _ in self.depends_on)
            if not present[name] and (setting or removing or depends):
                # Adding the whole map is only right while it is still absent.
                guards.append(Guard(name, None, None))
        operations = [guard.operation() for guard in guards]
        for name, (setting, removing) in writes.items():
            operations += [
                {"op": "remove", "path": json_pointer(name, k)} for k in sorted(removing)
            ]
            if not setting:
                continue
            if present[name]:
                operations += [
                    {"op": "add", "path": json_pointer(name, k), "value": setting[k]}
                    for k in sorted(setting)
                ]
            else:
                operations.append(
                    {
                        "op": "add",
                        "path": json_pointer(name),
                        "value": dict(sorted(setting.items())),
                    }
                )
        return GuardedPatch(operations, tuple(guards), frozenset(self.remove_annotations))


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
    depends_on: dict[tuple[str, str], str | None] = {}
    if remove_labels or remove_annotations or OWNERSHIP_ANNOTATION in set_annotations:
        # What this plan read to decide what to remove and what to own: the two
        # ownership annotations, each label it removes, and each key it stops listing
        # because the label was gone (were it back, dropping it would orphan it).
        depends_on[("annotations", OWNERSHIP_ANNOTATION)] = annotations.get(OWNERSHIP_ANNOTATION)
        depends_on[("annotations", NFD_OWNERSHIP_ANNOTATION)] = annotations.get(
            NFD_OWNERSHIP_ANNOTATION
        )
        for key in remove_labels:
            depends_on[("labels", key)] = labels[key]
        for key in owned_before - set(desired) - nfd_keys:
            if key not in labels:
                depends_on[("labels", key)] = None
    return NodeUpdate(
        set_labels=set_labels,
        remove_labels=remove_labels,
        set_annotations=set_annotations,
        remove_annotations=remove_annotations,
        skipped_nfd_keys=skipped,
        foreign_owned_keys=listed - owned_before,
        depends_on=depends_on,
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
    ) -> None:
        if not node_name:
            raise SinkPermanentError(
                "node sink: no node name; set --node-name or NODE_NAME (downward API spec.nodeName)"
            )
        self._client = client
        self.node_name = node_name
        self._stop = stop
        self._timestamp_annotation = timestamp_annotation
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
                    "node_labels_updated",
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
                "node_update_conflict",
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
