"""gfd installed on a real control plane: deploy/ applied, nodes, pods and tokens made to order.

This module owns what the real-server suite does to a :class:`~tests.controlplane.ControlPlane`
before gfd runs: it applies the manifests of ``deploy/`` exactly as kustomize renders them
(NFD's own CRDs first), waits until the admission policies are enforced, and then makes,
per test, a Node, a Pod of gfd's DaemonSet bound to that Node, and a TokenRequest token for
the DaemonSet's ServiceAccount bound to that Pod: the credentials the kubelet would mount.
Names carry a per-test suffix, so the tests of one session never see each other's objects.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gfd.kube_api import KubeClient, RetryPolicy, connect_kubernetes
from tests.controlplane import ControlPlane, ControlPlaneError, write_kubeconfig
from tests.deploy.manifests import NAMESPACE, render

SERVICE_ACCOUNT = "gfd"
GFD_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
DAEMONSET = "gfd"
#: The overlays whose objects the suite installs: the node sink's and the NodeFeature sink's.
OVERLAYS = ("standalone", "node-feature-api")
#: Order of application: what later objects refer to comes first.
_KIND_ORDER = (
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ClusterRoleBinding",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "DaemonSet",
)
#: Retries short enough that a refused request fails a test in well under a second.
TEST_RETRIES = RetryPolicy(initial_delay=0.05, max_delay=0.5, deadline=20.0, max_retry_after=2.0)


def deploy_objects() -> list[dict[str, Any]]:
    """The objects of :data:`OVERLAYS`, rendered by kustomize, one per identity."""
    seen: dict[tuple[str, str | None, str], dict[str, Any]] = {}
    for overlay in OVERLAYS:
        for obj in render(overlay):
            key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
            seen.setdefault(key, obj)
    return sorted(seen.values(), key=lambda o: _KIND_ORDER.index(o["kind"]))


def _probe_event(node: str) -> dict[str, Any]:
    """An Event about ``node`` that only its own gfd may create."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.{uuid.uuid4().hex[:12]}", "namespace": NAMESPACE},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Node",
            "name": node,
            "namespace": NAMESPACE,
        },
        "reason": "GPUsHealthy",
        "message": "policy probe",
        "type": "Normal",
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
    }


@dataclass(frozen=True)
class GfdPod:
    """A Pod of gfd's DaemonSet on ``node``, with a token bound to it."""

    name: str
    uid: str
    node: str
    token: str
    kubeconfig: Path


class GfdCluster:
    """A control plane with gfd's manifests applied; makes nodes, pods and tokens."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.admin = plane.admin
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------- installing

    def install(self, crds: Path, objects: Iterable[Mapping[str, Any]]) -> None:
        for crd in yaml.safe_load_all(crds.read_text(encoding="utf-8")):
            if crd:
                self.admin.apply(crd)
        self._wait_established(["nodefeatures.nfd.k8s-sigs.io"])
        for obj in objects:
            self.admin.apply(obj)
        self._wait_policies_enforced()

    def _wait_established(self, names: list[str], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                crd = self.admin.get(
                    f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                conditions = (crd.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} not established after {timeout:.0f} s")
                time.sleep(0.1)

    def _wait_policies_enforced(self, timeout: float = 30.0) -> None:
        """Until every policy refuses a request that RBAC alone would allow.

        The API server loads policies through an informer: they apply a moment after
        they are created, and the suite must not start inside that moment.
        """
        pod = self.gfd_pod(self.node("policy-probe"))
        other = self.node("policy-probe-other")
        feature = {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {
                "name": f"nvidia-features-for-{other}",
                "namespace": NAMESPACE,
                "labels": {"nfd.node.kubernetes.io/node-name": other},
            },
            "spec": {"labels": {}},
        }
        deadline = time.monotonic() + timeout
        while True:
            node_status, _ = self.as_gfd(pod, "PATCH", f"/api/v1/nodes/{other}",
                                         {"metadata": {"labels": {"nvidia.com/probe": "x"}}},
                                         content_type="application/merge-patch+json")  # fmt: skip
            feature_status, _ = self.as_gfd(
                pod, "POST", f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures",
                feature,
            )  # fmt: skip
            health_status, _ = self.as_gfd(pod, "PATCH", f"/api/v1/nodes/{other}/status",
                                           {"metadata": {"labels": {"nvidia.com/probe": "x"}}},
                                           content_type="application/merge-patch+json")  # fmt: skip
            event_status, _ = self.as_gfd(
                pod, "POST", f"/api/v1/namespaces/{NAMESPACE}/events", _probe_event(other)
            )
            statuses = (node_status, feature_status, health_status, event_status)
            if statuses == (403, 403, 403, 403):
                return
            if not all(s in (200, 201, 403) for s in statuses):
                raise ControlPlaneError(f"policy probe: unexpected statuses {statuses}")
            if feature_status == 201:
                self.admin.delete(
                    f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures/"
                    f"nvidia-features-for-{other}"
                )
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"admission policies not enforced after {timeout:.0f} s")
            time.sleep(0.2)

    # ---------------------------------------------------------------- objects

    @functools.cached_property
    def daemonset_uid(self) -> str:
        daemonset = self.admin.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{DAEMONSET}")
        return str(daemonset["metadata"]["uid"])

    def unique(self, stem: str) -> str:
        return f"{stem}-{uuid.uuid4().hex[:8]}"

    def node(
        self,
        stem: str = "gpu-node",
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> str:
        """Create a Node (a unique name from ``stem``); return its name."""
        name = self.unique(stem)
        self.admin.request(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                    "annotations": dict(annotations or {}),
                },
            },
        )
        return name

    def node_metadata(self, name: str) -> dict[str, Any]:
        metadata: dict[str, Any] = self.admin.get(f"/api/v1/nodes/{name}")["metadata"]
        return metadata

    def labels(self, node: str) -> dict[str, str]:
        return dict(self.node_metadata(node).get("labels") or {})

    def annotations(self, node: str) -> dict[str, str]:
        return dict(self.node_metadata(node).get("annotations") or {})

    def gfd_pod(self, node: str, *, daemonset: tuple[str, str] | None = None) -> GfdPod:
        """A Pod of gfd's DaemonSet (or of ``daemonset`` = (name, uid)) scheduled on ``node``,
        and a token for gfd's ServiceAccount bound to it."""
        ds_name, ds_uid = daemonset or (DAEMONSET, self.daemonset_uid)
        name = self.unique(f"{ds_name}")
        _, pod = self.admin.request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": ds_name,
                            "uid": ds_uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "nodeName": node,
                    "containers": [{"name": "gfd", "image": "gfd:test"}],
                },
            },
        )
        uid = pod["metadata"]["uid"]
        token = self.token({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid})
        return GfdPod(name, uid, node, token, self.kubeconfig(token, name))

    def token(self, bound: Mapping[str, str]) -> str:
        """A TokenRequest token of gfd's ServiceAccount bound to the object ``bound``."""
        _, review = self.admin.request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600, "boundObjectRef": dict(bound)},
            },
        )
        return str(review["status"]["token"])

    def node_bound_token(self, node: str) -> str:
        uid = self.node_metadata(node)["uid"]
        return self.token({"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid})

    def kubeconfig(self, token: str, stem: str) -> Path:
        return write_kubeconfig(
            self.workdir / f"{stem}.kubeconfig",
            self.plane.url,
            self.plane.pki.ca_cert,
            user={"token": token},
        )

    def client(self, kubeconfig: Path, *, request_timeout: float = 5.0) -> KubeClient:
        """gfd's own Kubernetes client, as gfd builds it, with this kubeconfig."""
        return connect_kubernetes(
            kubeconfig=str(kubeconfig), request_timeout=request_timeout, retry_policy=TEST_RETRIES
        )

    def as_gfd(
        self,
        pod: GfdPod | str,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """One raw request with gfd's token (a pod's, or a token string); any status returns."""
        token = pod.token if isinstance(pod, GfdPod) else pod
        return self.plane.request_with_token(token, method, path, body, content_type=content_type)
