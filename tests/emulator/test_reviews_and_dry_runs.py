"""The emulator's access reviews, dry runs and validating admission policies, answered in
the shapes Kubernetes' API reference and kube-apiserver's source give them.

- ``SelfSubjectAccessReview`` and ``SelfSubjectReview``: created (201) by any
  authenticated user, whatever its rules (``system:basic-user``), echoed with a
  ``status``; ``allowed`` by the caller's own rules; stored nowhere.
- ``dryRun=All``: the write is checked (preconditions, validation, admission) and
  answered as it would be stored, and nothing changes; another value is refused.
- A policy's denial: 403 Forbidden, ``<resource> "<name>" is forbidden:
  ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>``.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.emulator import AdmissionAttributes, ApiServerEmulator, Principal, ValidatingPolicy

NODE = "n1"
TOKEN = "t"
USER = "system:serviceaccount:gpu-operator:gfd"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
MERGE = "application/merge-patch+json"


@pytest.fixture
def emulator() -> Iterator[ApiServerEmulator]:
    with ApiServerEmulator() as api:
        api.add_node(NODE, labels={"a": "1"})
        yield api


def send(
    emulator: ApiServerEmulator,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", emulator.port, timeout=5)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": content_type}
    payload = json.dumps(body).encode() if body is not None else None
    try:
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def review(verb: str, resource: str, **attributes: str) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "resource": resource, **attributes}},
    }


def test_an_access_review_answers_by_the_callers_rules(emulator: ApiServerEmulator) -> None:
    rules = frozenset({("get", "nodes"), ("create", "events", "default")})
    emulator.set_token(TOKEN, Principal(USER, rules, namespace="gpu-operator"))
    asked = {
        ("get", "nodes", ""): True,
        ("patch", "nodes", ""): False,
        ("create", "events", "default"): True,
        ("create", "events", "kube-system"): False,
    }
    for (verb, resource, namespace), allowed in asked.items():
        body = review(verb, resource, **({"namespace": namespace} if namespace else {}))
        status, answer = send(emulator, "POST", REVIEWS, body)
        assert status == 201
        assert answer["kind"] == "SelfSubjectAccessReview"
        assert answer["apiVersion"] == "authorization.k8s.io/v1"
        assert answer["spec"] == body["spec"]
        assert answer["status"] == {"allowed": allowed}, (verb, resource, namespace)


def test_an_access_review_names_a_subresource_as_rbac_does(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER, frozenset({("patch", "nodes")})))
    _, plain = send(emulator, "POST", REVIEWS, review("patch", "nodes"))
    _, status = send(emulator, "POST", REVIEWS, review("patch", "nodes", subresource="status"))
    # RBAC's "nodes" does not cover nodes/status.
    assert (plain["status"]["allowed"], status["status"]["allowed"]) == (True, False)


def test_reviews_need_no_rule_but_a_valid_token(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER, frozenset()))
    status, _ = send(emulator, "POST", REVIEWS, review("get", "nodes"))
    assert status == 201
    emulator.revoke_token(TOKEN)
    status, answer = send(emulator, "POST", REVIEWS, review("get", "nodes"))
    assert (status, answer["reason"]) == (401, "Unauthorized")


def test_an_access_review_without_attributes_is_invalid(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}
    status, answer = send(emulator, "POST", REVIEWS, body)
    assert (status, answer["reason"]) == (422, "Invalid")
    assert "exactly one of nonResourceAttributes or resourceAttributes" in answer["message"]


def test_reviews_are_created_only(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    status, answer = send(emulator, "GET", REVIEWS)
    assert (status, answer["reason"]) == (405, "MethodNotAllowed")


def test_a_self_subject_review_names_the_user_and_its_groups(emulator: ApiServerEmulator) -> None:
    claims = {"authentication.kubernetes.io/node-name": (NODE,)}
    emulator.set_token(TOKEN, Principal(USER, frozenset(), extra=claims))
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    status, answer = send(emulator, "POST", WHOAMI, body)
    assert status == 201
    assert answer["status"]["userInfo"] == {
        "username": USER,
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:gpu-operator",
            "system:authenticated",
        ],
        "extra": {"authentication.kubernetes.io/node-name": [NODE]},
    }


def test_a_dry_run_patch_answers_the_patched_node_and_stores_nothing(
    emulator: ApiServerEmulator,
) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    before = emulator.node(NODE)
    revision = emulator.revision
    patch = {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}
    status, answer = send(
        emulator, "PATCH", f"/api/v1/nodes/{NODE}?dryRun=All", patch, content_type=MERGE
    )
    assert status == 200
    assert answer["metadata"]["labels"] == {"a": "1", "nvidia.com/gpu.count": "8"}
    # No version is handed out: the answer keeps the stored one.
    assert answer["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert (emulator.node(NODE), emulator.revision) == (before, revision)


def test_a_dry_run_is_checked_as_the_write_would_be(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    stale = {"metadata": {"resourceVersion": "1", "labels": {"b": "2"}}}
    status, answer = send(
        emulator, "PATCH", f"/api/v1/nodes/{NODE}?dryRun=All", stale, content_type=MERGE
    )
    assert (status, answer["reason"]) == (409, "Conflict")
    invalid = {"metadata": {"labels": {"b": "not valid!"}}}
    status, answer = send(
        emulator, "PATCH", f"/api/v1/nodes/{NODE}?dryRun=All", invalid, content_type=MERGE
    )
    assert (status, answer["reason"]) == (422, "Invalid")


def test_a_dry_run_create_stores_nothing(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    path = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/gpu-operator/nodefeatures"
    body = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": "nvidia-features-for-n1"},
        "spec": {"labels": {"nvidia.com/gpu.count": "8"}},
    }
    status, answer = send(emulator, "POST", f"{path}?dryRun=All", body)
    assert status == 201
    assert answer["metadata"]["name"] == "nvidia-features-for-n1"
    assert "resourceVersion" not in answer["metadata"]
    assert emulator.nodefeature("gpu-operator", "nvidia-features-for-n1") is None


def test_a_dry_run_of_another_value_is_refused(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    patch = {"metadata": {"labels": {"b": "2"}}}
    status, answer = send(
        emulator, "PATCH", f"/api/v1/nodes/{NODE}?dryRun=true", patch, content_type=MERGE
    )
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"true"}: '
        'supported values: "All"'
    )
    assert emulator.node_labels(NODE) == {"a": "1"}


def only_nvidia_labels(request: AdmissionAttributes) -> str | None:
    """A policy in the spirit of gfd's: a node's labels may change under nvidia.com/ only."""
    if request.resource != "nodes" or request.operation != "UPDATE" or request.subresource:
        return None
    old = (request.old_object or {}).get("metadata", {}).get("labels") or {}
    new = (request.object or {}).get("metadata", {}).get("labels") or {}
    changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    if all(key.startswith("nvidia.com/") for key in changed):
        return None
    return "gfd may add, change or remove only node labels under nvidia.com/"


def test_a_policy_denial_answers_as_kube_apiserver(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    emulator.add_validating_policy(ValidatingPolicy("gfd-node-labeler", only_nvidia_labels))
    for query in ("", "?dryRun=All"):
        patch = {"metadata": {"labels": {"example.com/x": "1"}}}
        status, answer = send(
            emulator, "PATCH", f"/api/v1/nodes/{NODE}{query}", patch, content_type=MERGE
        )
        assert status == 403
        assert answer["reason"] == "Forbidden"
        assert answer["details"] == {"name": NODE, "kind": "nodes"}
        assert answer["message"] == (
            f"nodes \"{NODE}\" is forbidden: ValidatingAdmissionPolicy 'gfd-node-labeler' with "
            "binding 'gfd-node-labeler' denied request: gfd may add, change or remove only "
            "node labels under nvidia.com/"
        )
    assert emulator.node_labels(NODE) == {"a": "1"}
    allowed = {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}
    status, _ = send(emulator, "PATCH", f"/api/v1/nodes/{NODE}", allowed, content_type=MERGE)
    assert status == 200
    assert emulator.node_labels(NODE) == {"a": "1", "nvidia.com/gpu.count": "8"}


def test_a_policy_sees_the_user_its_claims_and_the_objects(emulator: ApiServerEmulator) -> None:
    claims = {"authentication.kubernetes.io/node-name": (NODE,)}
    emulator.set_token(TOKEN, Principal(USER, extra=claims))
    seen: list[AdmissionAttributes] = []
    emulator.add_validating_policy(
        ValidatingPolicy("watch", lambda request: seen.append(request), binding="b")
    )
    patch = {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}
    send(emulator, "PATCH", f"/api/v1/nodes/{NODE}?dryRun=All", patch, content_type=MERGE)
    (request,) = seen
    assert (request.operation, request.resource, request.name, request.user) == (
        "UPDATE",
        "nodes",
        NODE,
        USER,
    )
    assert request.extra == claims and request.dry_run
    assert request.old_object is not None and request.object is not None
    assert request.old_object["metadata"]["labels"] == {"a": "1"}
    assert request.object["metadata"]["labels"] == {"a": "1", "nvidia.com/gpu.count": "8"}


def test_a_policy_object_can_be_read(emulator: ApiServerEmulator) -> None:
    emulator.set_token(TOKEN, Principal(USER))
    emulator.add_validating_policy(ValidatingPolicy("gfd-node-labeler", lambda _: None))
    base = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    status, answer = send(emulator, "GET", f"{base}/gfd-node-labeler")
    assert (status, answer["kind"], answer["metadata"]["name"]) == (
        200,
        "ValidatingAdmissionPolicy",
        "gfd-node-labeler",
    )
    status, _ = send(emulator, "GET", f"{base}/missing")
    assert status == 404
