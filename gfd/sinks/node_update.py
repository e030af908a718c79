"""What one cycle must change on its Node, and the bodies that change it.

This module owns the node sink's ownership rules, as a pure diff
(:func:`plan_node_update`) of the node as read against what gfd publishes. gfd records
the label keys it set in the annotation ``nvidia.com/gfd.labels`` (sorted,
comma-separated) and, on every cycle:

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
* writes its annotations (:data:`OWNED_ANNOTATIONS`: the topology matrix, the GPUs'
  identity and, optionally, the timestamp) by the same rules: gfd owns exactly that fixed set and
  removes one from the node when it stops publishing it.

The resulting :class:`NodeUpdate` writes itself two ways: as a JSON merge patch
(:meth:`NodeUpdate.merge_patch`), and as a JSON Patch whose ``test`` operations hold
exactly what it depends on (:meth:`NodeUpdate.guarded_patch`); which of the two the
sink sends, and when, is :mod:`gfd.sinks.node`'s business.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from gfd.base.frozen import frozen_dataclass
from gfd.labels.core import TIMESTAMP_KEY
from gfd.labels.families import gfd_can_produce
from gfd.sinks import Publication
from gfd.sinks.node_identity import IDENTITY_ANNOTATION
from gfd.topology.render import ANNOTATION_KEY

OWNERSHIP_ANNOTATION = "nvidia.com/gfd.labels"
NFD_OWNERSHIP_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
NFD_DEFAULT_PREFIX = "feature.node.kubernetes.io/"
TOPOLOGY_ANNOTATION = ANNOTATION_KEY
#: The node annotations gfd owns, besides its ownership annotation: the topology matrix,
#: the GPUs' identity (:mod:`gfd.sinks.node_identity`) and the optional timestamp.
OWNED_ANNOTATIONS = frozenset({TOPOLOGY_ANNOTATION, IDENTITY_ANNOTATION, TIMESTAMP_KEY})
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


@frozen_dataclass
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


@frozen_dataclass
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


@frozen_dataclass
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
