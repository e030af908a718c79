"""Every overlay in deploy/ renders with kubectl kustomize, and every object it renders
passes the Kubernetes OpenAPI schemas (strict: unknown fields are errors) of each
supported Kubernetes version, offline."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.deploy.manifests import (
    DEPLOY_DIR,
    NAMESPACE,
    OVERLAYS,
    SUPPORTED_KUBERNETES,
    find,
    render,
    render_directory,
    workload,
)

#: Kinds the API server keeps outside namespaces (kustomize does not know all of them).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def test_every_overlay_directory_is_tested() -> None:
    on_disk = {path.name for path in (DEPLOY_DIR / "overlays").iterdir() if path.is_dir()}
    assert on_disk == set(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
def test_every_object_passes_the_schema(overlay: str, version: str) -> None:
    for obj in render(overlay):
        where = f"{overlay}: {obj['kind']}/{obj['metadata']['name']} on Kubernetes {version}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{where}: {error.message} at {'.'.join(map(str, error.path))}")
        except kubernetes_validate.SchemaNotFoundError as error:
            pytest.fail(f"{where}: {error.message}")


def test_strict_validation_catches_a_misspelt_field() -> None:
    # The negative control: the schemas really are strict about unknown fields.
    daemonset = workload(render("standalone"))
    daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "readOnlyRootFileSystem"
    ] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, SUPPORTED_KUBERNETES[0], strict=True)


def test_admission_policy_needs_kubernetes_1_30() -> None:
    # Why 1.30 is the floor: ValidatingAdmissionPolicy v1 (and the node-name claim
    # the policy reads) do not exist in 1.29.
    for policy in find(render("standalone"), "ValidatingAdmissionPolicy"):
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(policy, "1.29", strict=True)


#: Objects that live in default: the right to create Events about a Node, which the API
#: server files there (docs/health.md).
IN_DEFAULT = {("Role", "gfd-node-events"), ("RoleBinding", "gfd-node-events")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_namespaces_and_names(overlay: str) -> None:
    objects = render(overlay)
    identities = [
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects
    ]
    assert len(identities) == len(set(identities)), f"duplicate objects: {identities}"
    assert [o["metadata"]["name"] for o in find(objects, "Namespace")] == [NAMESPACE]
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, f"{obj['kind']} is cluster-scoped but has a namespace"
        elif (obj["kind"], obj["metadata"]["name"]) in IN_DEFAULT:
            assert namespace == "default", f"{obj['kind']}/{obj['metadata']['name']}"
        else:
            assert namespace == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "gfd"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_image_is_the_released_tag(overlay: str) -> None:
    import gfd

    container = workload(render(overlay))["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"gfd:{gfd.__version__}"
    assert container["imagePullPolicy"] == "IfNotPresent"


def _copy_deploy(tmp_path: Path, namespace: str) -> Path:
    copied = tmp_path / "deploy"
    shutil.copytree(DEPLOY_DIR, copied)
    base = copied / "base" / "kustomization.yaml"
    base.write_text(
        base.read_text().replace(f"namespace: {NAMESPACE}", f"namespace: {namespace}"),
        encoding="utf-8",
    )
    return copied


def _service_account_texts(objects: list[dict[str, Any]]) -> list[str]:
    texts = []
    for obj in objects:
        if obj["kind"] == "ValidatingAdmissionPolicy":
            texts += [c["expression"] for c in obj["spec"]["matchConditions"]]
    return texts


@pytest.mark.parametrize("overlay", ["standalone", "node-feature-api"])
def test_namespace_set_in_the_base_reaches_every_reference(tmp_path: Path, overlay: str) -> None:
    # The ServiceAccount's namespace appears as text in bindings and in the policies'
    # user-name condition; changing it in the base must change all of them.
    objects = render_directory(_copy_deploy(tmp_path, "gpu-ops") / "overlays" / overlay)
    for obj in objects:
        if (obj["kind"], obj["metadata"]["name"]) in IN_DEFAULT:
            assert obj["metadata"]["namespace"] == "default", obj["kind"]
        elif obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "gpu-ops", obj["kind"]
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "gpu-ops", obj["kind"]
    texts = _service_account_texts(objects)
    assert texts and all("'system:serviceaccount:gpu-ops:gfd'" in text for text in texts)
