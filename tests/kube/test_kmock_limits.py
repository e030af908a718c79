"""What kmock (the independent API mock the sink suites also run against) does not do,
shown against kmock itself, so that the list in :mod:`tests.kube.servers` and
docs/testing.md stays true when kmock changes. Each case is one the sink suites keep on
the project's emulator; the emulator's answer to the same request is held to
kube-apiserver's recorded answers (``tests/emulator/test_recorded_answers.py``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube.conftest import NAMESPACE, NODE, kmock_or_skip
from tests.kube.servers import NODES, KmockServer

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
FEATURES = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"


@pytest.fixture
def kmock_server() -> Iterator[KmockServer]:
    kmock_or_skip()
    with KmockServer() as server:
        server.seed(node=NODE, namespace=NAMESPACE, pod="gfd-abcde", token="", labels={"a": "b"})
        yield server


def send(
    server: KmockServer,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    token: str | None = None,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def test_a_stale_resource_version_precondition_is_stored_not_checked(
    kmock_server: KmockServer,
) -> None:
    # kube-apiserver answers 409 Conflict (recorded: stale-precondition-merge-patch).
    stale = {"metadata": {"resourceVersion": "0-stale", "labels": {"a": "c"}}}
    status, body = send(kmock_server, "PATCH", f"/api/v1/nodes/{NODE}", stale, MERGE)
    assert status == 200
    assert body["metadata"]["resourceVersion"] == "0-stale"


def test_put_is_not_served(kmock_server: KmockServer) -> None:
    node = kmock_server.get(NODES, NODE)
    status, body = send(kmock_server, "PUT", f"/api/v1/nodes/{NODE}", node)
    assert (status, body["reason"]) == (404, "Endpoint Not Found")


def test_a_status_patch_replaces_the_conditions_list_whole(kmock_server: KmockServer) -> None:
    path = f"/api/v1/nodes/{NODE}/status"
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    ours = {"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}}
    assert send(kmock_server, "PATCH", path, ready, STRATEGIC)[0] == 200
    status, body = send(kmock_server, "PATCH", path, ours, STRATEGIC)
    # A strategic merge keeps Ready beside GPUHealthy; kmock keeps GPUHealthy alone.
    assert status == 200
    assert [c["type"] for c in body["status"]["conditions"]] == ["GPUHealthy"]


def test_a_failed_json_patch_test_is_a_500(kmock_server: KmockServer) -> None:
    patch = [{"op": "test", "path": "/metadata/labels/a", "value": "not-b"}]
    status, body = send(kmock_server, "PATCH", f"/api/v1/nodes/{NODE}", patch, JSON_PATCH)
    assert (status, body["reason"]) == (500, "JsonPatchTestFailed")


def test_no_authentication_authorisation_or_validation(kmock_server: KmockServer) -> None:
    invalid = {"metadata": {"labels": {"nvidia.com/gpu.product": "not valid!"}}}
    status, _ = send(kmock_server, "PATCH", f"/api/v1/nodes/{NODE}", invalid, MERGE, token=None)
    assert status == 200
    # Any token reads anything (gfd's Role grants no pods outside its namespace).
    status, _ = send(
        kmock_server, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods/gfd-abcde", token="anything"
    )
    assert status == 200


def test_errors_carry_kmocks_own_reasons_and_a_create_answers_200(
    kmock_server: KmockServer,
) -> None:
    status, body = send(kmock_server, "GET", "/api/v1/nodes/no-such-node")
    assert (status, body["reason"]) == (404, "Object Not Found")
    assert "traceback" in body["details"]
    feature = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": "x"},
        "spec": {"labels": {}},
    }
    assert send(kmock_server, "POST", FEATURES, feature)[0] == 200
    status, body = send(kmock_server, "POST", FEATURES, feature)
    assert (status, body["reason"]) == (409, "Object Already Exists")
