"""The chart on a real kube-apiserver, installed, upgraded and uninstalled by Helm v4's own
engine (PyPI helm-python-sdk: Helm's Go SDK in-process, talking to the server through the
admin kubeconfig, as the Helm CLI would).

Every object of every configuration in the matrix passes a server-side dry run (strict field
validation, admission included). One release is installed per scenario, in a namespace of
its own, on the suite's shared control plane: gfd then runs with the chart's own
ServiceAccount and a token bound to a Pod of the chart's DaemonSet, and labels its node and
nothing else (or, with the NodeFeature sink, writes only its node's NodeFeature); an upgrade that changes ``gfd.sleepInterval`` changes the DaemonSet; an
uninstall leaves none of the objects the chart created.

The server is the ``kube`` oracle, which no package registry ships: without
``KUBEBUILDER_ASSETS`` every case skips with one line, in CI too. The offline checks of the
chart (lint, render, schema, the install's notes) run in CI in tests/helm.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane import ControlPlane, write_kubeconfig
from tests.deploy.manifests import args_of
from tests.helm.chart import FOREIGN_KINDS, MATRIX, Helm, Manifest, load_chart
from tests.reliability.agent_process import environment, expected_labels, gfd_command

# Helm's engine is not an oracle mark of its own: it comes from requirements/ci.lock, and
# tests/helm/chart.py's load_chart() fails (CI) or skips (elsewhere) without it.
pytestmark = pytest.mark.oracle("kube")

#: REST collection of each kind the chart renders: (API prefix, plural, namespaced).
_RESOURCES: dict[str, tuple[str, str, bool]] = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    # The uninstall's cleanup (a Helm hook: checked by the dry run, never installed here).
    "Job": ("/apis/batch/v1", "jobs", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}


def collection(kind: str, namespace: str | None) -> str:
    prefix, plural, namespaced = _RESOURCES[kind]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


def path_of(obj: Manifest) -> str:
    return f"{collection(obj['kind'], obj['metadata'].get('namespace'))}/{obj['metadata']['name']}"


@dataclass(frozen=True)
class Releases:
    """Helm's release actions on the control plane, as the cluster's admin."""

    helm: Helm
    kubeconfig: Path

    @contextlib.contextmanager
    def config(self, namespace: str) -> Iterator[Any]:
        """A ``helm_python.Config`` for ``namespace`` (the CLI's ``--namespace``), closed
        after use so that no native handle outlives the test."""
        with self.helm.sdk.Config(kubeconfig_path=self.kubeconfig, namespace=namespace) as cfg:
            yield cfg

    def uninstall(self, release: Release, *, wait: bool = False) -> None:
        with self.config(release.namespace) as cfg:
            # "watcher": wait until every object is gone (the CLI's --wait).
            cfg.uninstall(release.name, **({"wait": "watcher", "timeout": 60} if wait else {}))


@pytest.fixture(scope="module")
def helm() -> Helm:
    return load_chart()


@pytest.fixture(scope="module")
def releases(control_plane: ControlPlane, helm: Helm) -> Releases:
    return Releases(helm, control_plane.admin_kubeconfig)


# ------------------------------------------------------------------ server-side dry run

DRY_RUN_NAMESPACE = "gfd-helm-dry-run"


@pytest.fixture(scope="module")
def dry_run_namespace(control_plane: ControlPlane) -> str:
    control_plane.admin.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRY_RUN_NAMESPACE}}
    )
    return DRY_RUN_NAMESPACE


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_object_passes_a_server_side_dry_run(
    control_plane: ControlPlane, helm: Helm, dry_run_namespace: str, case: str
) -> None:
    objects = helm.template(MATRIX[case], release=f"dry-{case}", namespace=dry_run_namespace)
    # A value may place an object in a namespace of its own (the dashboard where the
    # Grafana sidecar looks): the cluster has it, as it would.
    for namespace in {o["metadata"].get("namespace") for o in objects} - {None, dry_run_namespace}:
        control_plane.admin.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            ok=(201, 409),
        )
    checked = 0
    for obj in objects:
        if obj["kind"] in FOREIGN_KINDS:
            continue  # a CRD of the Prometheus Operator's, not served here
        status, reply = control_plane.admin.request(
            "POST",
            collection(obj["kind"], obj["metadata"].get("namespace")),
            obj,
            query={"dryRun": "All", "fieldValidation": "Strict"},
            ok=tuple(range(400, 600)),
        )
        assert status == 201, f"{case}: {obj['kind']}/{obj['metadata']['name']}: {reply}"
        checked += 1
    assert checked >= 2


def test_dry_run_refuses_a_bad_object(control_plane: ControlPlane, dry_run_namespace: str) -> None:
    # The negative control: the server does judge what a dry run sends.
    status, _ = control_plane.admin.request(
        "POST",
        collection("ServiceAccount", dry_run_namespace),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "Not_A_Name"}},
        query={"dryRun": "All", "fieldValidation": "Strict"},
        ok=tuple(range(400, 600)),
    )
    assert status == 422


# ------------------------------------------------------------------ installed releases


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    objects: list[Manifest]
    notes: str

    def one(self, kind: str) -> Manifest:
        found = [o for o in self.objects if o["kind"] == kind]
        assert len(found) == 1, f"{self.name}: {len(found)} objects of kind {kind}"
        return found[0]


def install(releases: Releases, name: str, values: Mapping[str, Any] | None = None) -> Release:
    """``helm install NAME`` into namespace NAME (created by Helm), with ``values``.

    Without the uninstall's cleanup hook: no kubelet runs a Job on this control plane, so
    its post-delete Job would never finish and every uninstall would time out. The
    cleanup itself is tested on the API server emulator (tests/cleanup/test_cleanup.py), its
    objects by the dry run below."""
    chosen = {"cleanup": {"onUninstall": False}, **dict(values or {})}
    with releases.config(name) as cfg:
        summary = cfg.install(
            releases.helm.chart, name, chosen, namespace=name, create_namespace=True
        )
        # What Helm stored for the release (the CLI's `helm get manifest`), not what it
        # was asked to render: the two must agree for the release to be managed at all.
        manifest = cfg.status(name)["manifest"]
    objects = [doc for doc in yaml.safe_load_all(manifest) if doc]
    return Release(name, name, objects, str(summary.get("notes", "")))


@pytest.fixture(scope="module")
def labelling(releases: Releases) -> Release:
    """The default release (node sink, admission policy) for gfd to run under."""
    return install(releases, "gfd-helm-labels")


def make_node(plane: ControlPlane, stem: str) -> str:
    name = f"{stem}-{uuid.uuid4().hex[:8]}"
    plane.admin.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
                "annotations": {"example.com/owner": "tests"},
            },
        },
    )
    return name


@dataclass(frozen=True)
class BoundPod:
    name: str
    node: str
    kubeconfig: Path
    token: str


@contextlib.contextmanager
def bound_pod(control_plane: ControlPlane, release: Release, workdir: Path) -> Iterator[BoundPod]:
    """A Pod of the release's DaemonSet on a fresh node, as the DaemonSet would make it
    (its ServiceAccount, its owner), and a TokenRequest token bound to it."""
    admin = control_plane.admin
    daemonset = release.one("DaemonSet")
    namespace = release.namespace
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    live = admin.get(path_of(daemonset))
    node = make_node(control_plane, "helm-gpu-node")
    name = f"{daemonset['metadata']['name']}-{uuid.uuid4().hex[:5]}"
    _, pod = admin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": daemonset["spec"]["selector"]["matchLabels"],
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": live["metadata"]["name"],
                        "uid": live["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "serviceAccountName": account,
                "automountServiceAccountToken": False,
                "nodeName": node,
                "containers": [{"name": "gfd", "image": "gfd:test"}],
            },
        },
    )
    _, review = admin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": name,
                    "uid": pod["metadata"]["uid"],
                },
            },
        },
    )
    token = str(review["status"]["token"])
    kubeconfig = write_kubeconfig(
        workdir / f"{name}.kubeconfig", control_plane.url, control_plane.pki.ca_cert,
        user={"token": token},
    )  # fmt: skip
    try:
        yield BoundPod(name, node, kubeconfig, token)
    finally:
        admin.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")


@pytest.fixture
def chart_pod(
    control_plane: ControlPlane, labelling: Release, tmp_path: Path
) -> Iterator[BoundPod]:
    with bound_pod(control_plane, labelling, tmp_path) as pod:
        yield pod


def run_as_the_daemonset(release: Release, pod: BoundPod) -> None:
    """gfd once on a simulated DGX H100, with the DaemonSet's own arguments as the chart
    rendered them, as ``pod`` with its token (no metrics port: it is a one-shot)."""
    args = [a for a in args_of(release.one("DaemonSet")) if not a.startswith("--metrics-address")]
    done = subprocess.run(
        gfd_command(*args, "--oneshot", "--simulate", "dgx-h100",
                    "--kubeconfig", str(pod.kubeconfig)),
        env=environment({"NODE_NAME": pod.node, "POD_NAME": pod.name,
                         "NAMESPACE": release.namespace}),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def service_account_user(release: Release) -> str:
    account = release.one("DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{release.namespace}:{account}"


def wait_until_policy_refuses(plane: ControlPlane, pod: BoundPod, other: str) -> None:
    """Until the chart's admission policy is in force: the token may not touch ``other``.

    The API server loads a new policy through an informer, a moment after it is created.
    """
    deadline = time.monotonic() + 30
    while True:
        status, body = plane.request_with_token(
            pod.token, "PATCH", f"/api/v1/nodes/{other}",
            {"metadata": {"labels": {"nvidia.com/gpu.product": "probe"}}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        if status == 403:
            return
        assert status == 200, body
        assert time.monotonic() < deadline, "the chart's admission policy was never enforced"
        plane.admin.request(
            "PATCH", f"/api/v1/nodes/{other}",
            {"metadata": {"labels": {"nvidia.com/gpu.product": None}}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        time.sleep(0.2)


def test_gfd_with_the_charts_service_account_labels_its_node_and_nothing_else(
    control_plane: ControlPlane, labelling: Release, chart_pod: BoundPod
) -> None:
    admin = control_plane.admin
    other = make_node(control_plane, "helm-other-node")
    wait_until_policy_refuses(control_plane, chart_pod, other)
    before = admin.get(f"/api/v1/nodes/{chart_pod.node}")["metadata"]
    other_before = admin.get(f"/api/v1/nodes/{other}")["metadata"]
    mark = control_plane.audit.mark()

    assert "--patch-node" in args_of(labelling.one("DaemonSet"))
    run_as_the_daemonset(labelling, chart_pod)

    after = admin.get(f"/api/v1/nodes/{chart_pod.node}")["metadata"]
    expected = expected_labels("dgx-h100")
    assert after["labels"] == {**before["labels"], **expected}
    assert all(
        key.startswith("nvidia.com/") for key in set(after["labels"]) - set(before["labels"])
    )
    # Its own-keys list, the topology, and each GPU's identity (gfd/sinks/node_identity.py).
    assert set(after["annotations"]) - set(before["annotations"]) <= {
        "nvidia.com/gfd.labels", "nvidia.com/gpu.topology", "nvidia.com/gpu.devices"
    }  # fmt: skip
    assert after["annotations"]["example.com/owner"] == "tests"
    other_after = admin.get(f"/api/v1/nodes/{other}")["metadata"]
    assert (other_after["labels"], other_after["annotations"]) == (
        other_before["labels"], other_before["annotations"]
    )  # fmt: skip

    requests = [
        (e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("subresource"),
         e["objectRef"].get("namespace"), e["objectRef"].get("name"))
        for e in control_plane.audit.events(mark, user=service_account_user(labelling))
    ]  # fmt: skip
    assert requests, "gfd sent no request as the chart's ServiceAccount"
    # The labels; and, with health reporting (health.condition, on by default), its
    # node's status and events in default, and the DRA driver's ResourceSlices, which the
    # device-plugin check lists on a node without the plugin's resources to tell a DRA node
    # (gfd/app/api_access.py; the chart's ClusterRole grants it).
    allowed = {
        ("get", "nodes", None, None, chart_pod.node),
        ("patch", "nodes", None, None, chart_pod.node),
        ("patch", "nodes", "status", None, chart_pod.node),
        ("list", "resourceslices", None, None, None),
    }
    assert {r for r in requests if r[1] != "events"} <= allowed
    assert all(r[:4] == ("create", "events", None, "default")
               for r in requests if r[1] == "events")  # fmt: skip


def test_node_feature_release_publishes_only_its_nodes_object(
    control_plane: ControlPlane, releases: Releases, tmp_path: Path
) -> None:
    release = install(releases, "gfd-helm-nodefeature", MATRIX["node-feature-api"])
    admin = control_plane.admin
    features = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{release.namespace}/nodefeatures"
    try:
        with bound_pod(control_plane, release, tmp_path) as pod:
            node_before = admin.get(f"/api/v1/nodes/{pod.node}")["metadata"]
            # Until the chart's policy is in force: another node's object is refused.
            other = make_node(control_plane, "helm-other-node")
            foreign = {
                "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
                "kind": "NodeFeature",
                "metadata": {
                    "name": f"nvidia-features-for-{other}",
                    "labels": {"nfd.node.kubernetes.io/node-name": other},
                },
                "spec": {"labels": {}},
            }
            deadline = time.monotonic() + 30
            while True:
                status, body = control_plane.request_with_token(
                    pod.token, "POST", features, foreign, content_type="application/json"
                )
                if status == 403:
                    break
                assert status == 201, body
                admin.delete(f"{features}/nvidia-features-for-{other}")
                assert time.monotonic() < deadline, "the NodeFeature policy was never enforced"
                time.sleep(0.2)
            mark = control_plane.audit.mark()

            run_as_the_daemonset(release, pod)

            listed = admin.get(features)["items"]
            assert [o["metadata"]["name"] for o in listed] == [f"nvidia-features-for-{pod.node}"]
            feature = listed[0]
            assert feature["spec"]["labels"] == expected_labels("dgx-h100")
            assert feature["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == pod.node
            assert any(o["kind"] == "Pod" and o["name"] == pod.name
                       for o in feature["metadata"]["ownerReferences"])  # fmt: skip
            node_after = admin.get(f"/api/v1/nodes/{pod.node}")["metadata"]
            assert node_after["labels"] == node_before["labels"]
            resources = {
                e["objectRef"].get("resource")
                for e in control_plane.audit.events(mark, user=service_account_user(release))
            }
            assert resources and resources <= {"nodefeatures", "pods"}
    finally:
        releases.uninstall(release)


def test_install_notes_say_how_to_see_the_labels(labelling: Release) -> None:
    assert "kubectl get nodes -L nvidia.com/gpu.product" in labelling.notes
    assert f"-n {labelling.namespace} rollout status daemonset/gfd-helm-labels" in labelling.notes


def test_upgrade_changing_the_sleep_interval_changes_the_daemonset(
    control_plane: ControlPlane, releases: Releases
) -> None:
    release = install(releases, "gfd-helm-upgrade")
    path = path_of(release.one("DaemonSet"))
    before = control_plane.admin.get(path)
    assert "--sleep-interval=60s" in args_of(before)
    with releases.config(release.namespace) as cfg:
        # The CLI's --reuse-values --set gfd.sleepInterval=5m.
        cfg.upgrade(
            releases.helm.chart, release.name, {"gfd": {"sleepInterval": "5m"}},
            namespace=release.namespace, reuse_values=True,
        )  # fmt: skip
    after = control_plane.admin.get(path)
    args = args_of(after)
    assert "--sleep-interval=5m" in args and "--sleep-interval=60s" not in args
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # updated, not replaced
    releases.uninstall(release)


def _labelled(plane: ControlPlane, kind: str, namespace: str | None, release: str) -> list[str]:
    listed = plane.admin.request(
        "GET", collection(kind, namespace),
        query={"labelSelector": f"app.kubernetes.io/instance={release}"},
    )[1]  # fmt: skip
    return [item["metadata"]["name"] for item in listed["items"]]


def test_uninstall_leaves_nothing_the_chart_created(
    control_plane: ControlPlane, releases: Releases
) -> None:
    # Every kind the chart can make: all three sinks, policies, a config map.
    values = {**MATRIX["all-sinks"], **MATRIX["sharing-config-map"]}
    release = install(releases, "gfd-helm-uninstall", values)
    kinds = {o["kind"] for o in release.objects}
    assert kinds == set(_RESOURCES) - {"Service", "Job"}, kinds
    for obj in release.objects:
        assert control_plane.admin.request("GET", path_of(obj))[0] == 200
    releases.uninstall(release, wait=True)
    for obj in release.objects:
        status, _ = control_plane.admin.request("GET", path_of(obj), ok=(404,))
        assert status == 404, f"{obj['kind']}/{obj['metadata']['name']} is still there"
    for kind in _RESOURCES:
        assert _labelled(control_plane, kind, release.namespace, release.name) == [], kind
    # Helm's own record of the release (a Secret per revision) is gone too.
    secrets = control_plane.admin.request(
        "GET", f"/api/v1/namespaces/{release.namespace}/secrets",
        query={"labelSelector": f"owner=helm,name={release.name}"},
    )[1]  # fmt: skip
    assert secrets["items"] == []
    with releases.config(release.namespace) as cfg, pytest.raises(releases.helm.sdk.HelmError):
        cfg.status(release.name)
