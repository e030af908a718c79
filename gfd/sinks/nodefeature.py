"""The NodeFeature sink: gfd's labels as an ``nfd.k8s-sigs.io/v1alpha1`` NodeFeature.

This module owns the NodeFeature object gfd hands to nfd-master, which then labels
the node. The object (as NVIDIA's GPU Feature Discovery writes it):

* name ``nvidia-features-for-<node>`` in the agent's namespace;
* metadata label ``nfd.node.kubernetes.io/node-name: <node>`` (how nfd-master finds
  the node);
* ``spec.labels`` = gfd's labels, ``spec.features`` empty;
* owner references to the agent's Pod and to the Pod's controller (the DaemonSet,
  or the Job of a one-shot run), found from ``POD_NAME``, so that garbage
  collection removes the object when gfd is uninstalled.

A cycle makes one read (``resourceVersion=0``, raw JSON). The object is created
when missing and replaced (PUT, with the read ``resourceVersion`` as optimistic
lock) only when its spec, node label or owner references differ. On 409 the sink
reads again and recomputes. Node annotations (topology, timestamp) have no place in
a NodeFeature and are not published by this sink.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from gfd.base.errors import SinkError, SinkPermanentError
from gfd.base.logs import get_logger
from gfd.kube_api import KubeApiPermanentError, KubeClient, path_segment
from gfd.sinks import Publication

log = get_logger()

API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
KIND = "NodeFeature"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
MAX_CONFLICTS = 5


def nodefeature_name(node_name: str) -> str:
    """The NodeFeature object name for a node."""
    return f"nvidia-features-for-{node_name}"


def desired_spec(labels: Mapping[str, str]) -> dict[str, Any]:
    """``spec`` of gfd's NodeFeature: the labels, and no raw features."""
    return {
        "features": {"flags": {}, "attributes": {}, "instances": {}},
        "labels": dict(sorted(labels.items())),
    }


def owner_references_from_pod(pod: Mapping[str, Any]) -> list[dict[str, str]]:
    """Owner references naming ``pod`` and its controller (if it has one)."""
    metadata = pod.get("metadata") or {}
    refs = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": str(metadata.get("name", "")),
            "uid": str(metadata.get("uid", "")),
        }
    ]
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("controller"):
            refs.append({key: str(owner[key]) for key in ("apiVersion", "kind", "name", "uid")})
            break
    return refs


def _same_owners(stored: Any, desired: list[dict[str, str]]) -> bool:
    if not isinstance(stored, list):
        return not desired
    keys = ("apiVersion", "kind", "name", "uid")
    have = sorted(
        tuple(str(ref.get(k, "")) for k in keys) for ref in stored if isinstance(ref, dict)
    )
    want = sorted(tuple(ref[k] for k in keys) for ref in desired)
    return have == want


class NodeFeatureSink:
    """Creates or updates ``nvidia-features-for-<node_name>`` in ``namespace``; with
    ``dry_run``, as server-side dry runs only (``dryRun=All``: nothing is stored)."""

    name = "nodefeature"

    def __init__(
        self,
        *,
        client: KubeClient,
        node_name: str,
        namespace: str,
        pod_name: str | None,
        stop: threading.Event,
        max_conflicts: int = MAX_CONFLICTS,
        dry_run: bool = False,
    ) -> None:
        if not node_name:
            raise SinkPermanentError("NodeFeature sink: no node name; set --node-name or NODE_NAME")
        if not namespace:
            raise SinkPermanentError("NodeFeature sink: no namespace; set --namespace or NAMESPACE")
        self._client = client
        self.node_name = node_name
        self.namespace = namespace
        self.pod_name = pod_name or None
        self._stop = stop
        self._max_conflicts = max_conflicts
        self._writes = {"dryRun": "All"} if dry_run else None
        self.object_name = nodefeature_name(node_name)
        base = f"/apis/{API_VERSION}/namespaces/{path_segment(namespace)}/nodefeatures"
        self._collection_path = base
        self._path = f"{base}/{path_segment(self.object_name)}"
        self._owners: list[dict[str, str]] | None = None
        if self.pod_name is None:
            log.warning(
                "NodeFeature without owner",
                reason="POD_NAME is not set; the NodeFeature will not be garbage-collected",
            )

    def publish(self, publication: Publication) -> bool:
        deadline = self._client.deadline()
        owners = self._owner_references(deadline)
        spec = desired_spec(publication.labels)
        cached_read = True
        for _ in range(self._max_conflicts + 1):
            response = self._client.request(
                "GET",
                self._path,
                stop=self._stop,
                deadline=deadline,
                query={"resourceVersion": "0"} if cached_read else None,
                accept_statuses=(404,),
            )
            if response.status == 404:
                body = self._new_object(spec, owners)
                written = self._client.request(
                    "POST",
                    self._collection_path,
                    stop=self._stop,
                    deadline=deadline,
                    query=self._writes,
                    body=body,
                    accept_statuses=(409,),
                )
                action = "created"
            else:
                stored = response.json_object(f"NodeFeature {self._where}")
                replacement = self._replacement(stored, spec, owners)
                if replacement is None:
                    return False
                written = self._client.request(
                    "PUT",
                    self._path,
                    stop=self._stop,
                    deadline=deadline,
                    query=self._writes,
                    body=replacement,
                    accept_statuses=(409,),
                )
                action = "updated"
            if written.status != 409:
                log.info(
                    "NodeFeature written",
                    object=self._where,
                    action=action if self._writes is None else f"{action} (dry run)",
                    labels=len(spec["labels"]),
                )
                return True
            log.info("NodeFeature conflict", object=self._where)
            cached_read = False
            if self._stop.is_set():
                raise SinkError(
                    f"NodeFeature {self._where}: interrupted while resolving a conflict"
                )
        raise SinkError(
            f"NodeFeature {self._where}: still conflicting after {self._max_conflicts} attempts"
        )

    def close(self) -> None:
        """Nothing to release; the object stays for nfd-master (GC removes it with gfd)."""

    @property
    def _where(self) -> str:
        return f"{self.namespace}/{self.object_name}"

    def _new_object(self, spec: dict[str, Any], owners: list[dict[str, str]]) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.object_name,
            "namespace": self.namespace,
            "labels": {NODE_NAME_LABEL: self.node_name},
        }
        if owners:
            metadata["ownerReferences"] = owners
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}

    def _replacement(
        self, stored: dict[str, Any], spec: dict[str, Any], owners: list[dict[str, str]]
    ) -> dict[str, Any] | None:
        """The object to PUT, or None when ``stored`` already matches."""
        metadata = stored.get("metadata") or {}
        labels = metadata.get("labels") or {}
        owners_match = not owners or _same_owners(metadata.get("ownerReferences"), owners)
        if (
            stored.get("spec") == spec
            and labels.get(NODE_NAME_LABEL) == self.node_name
            and owners_match
        ):
            return None
        replacement = copy.deepcopy(stored)
        new_metadata = replacement.setdefault("metadata", {})
        new_metadata.setdefault("labels", {})[NODE_NAME_LABEL] = self.node_name
        if owners:
            new_metadata["ownerReferences"] = owners
        replacement["spec"] = spec
        replacement["apiVersion"] = API_VERSION
        replacement["kind"] = KIND
        return replacement

    def _owner_references(self, deadline: float) -> list[dict[str, str]]:
        if self.pod_name is None:
            return []
        if self._owners is None:
            path = (
                f"/api/v1/namespaces/{path_segment(self.namespace)}/pods/"
                f"{path_segment(self.pod_name)}"
            )
            try:
                response = self._client.request("GET", path, stop=self._stop, deadline=deadline)
            except KubeApiPermanentError as exc:
                if exc.status == 404:
                    raise SinkPermanentError(
                        f"NodeFeature owner: pod {self.namespace}/{self.pod_name} not found; "
                        "check POD_NAME and NAMESPACE (downward API)"
                    ) from exc
                raise
            pod = response.json_object(f"pod {self.namespace}/{self.pod_name}")
            self._owners = owner_references_from_pod(pod)
        return self._owners
