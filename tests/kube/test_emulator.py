"""The API server emulator keeps the API's promises, seen through the real client.

The client's API objects are typed ``Any`` here: its models mark every field
optional, and these tests are about the server's answers, not the models.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.emulator import ApiServerEmulator, Fault, Principal

NODE = "n1"
ADMIN = "admin-token"


@pytest.fixture
def api(emulator: ApiServerEmulator) -> Iterator[Any]:
    emulator.set_token(ADMIN, Principal("admin"))
    emulator.add_node(NODE, labels={"a": "1"}, annotations={"keep": "me"})
    configuration = k8s.Configuration(
        host=emulator.url, api_key={"authorization": f"Bearer {ADMIN}"}
    )
    configuration.retries = False
    with k8s.ApiClient(configuration) as api_client:
        yield k8s.CoreV1Api(api_client)


def raw_patch(api: Any, body: Any, content_type: str) -> dict[str, Any]:
    response = api.patch_node(
        NODE, body, _content_type=content_type, _preload_content=False, _request_timeout=5
    )
    return json.loads(response.data)  # type: ignore[no-any-return]


def status_of(error: ApiException) -> dict[str, Any]:
    return json.loads(error.body or "null")  # type: ignore[no-any-return]


def test_get_with_and_without_cached_read(emulator: ApiServerEmulator, api: Any) -> None:
    node = api.read_node(NODE, _request_timeout=5)
    assert node.metadata.labels == {"a": "1"}
    emulator.freeze_cache()
    emulator.change_node_metadata(NODE, labels={"a": "2"})
    conn = http.client.HTTPConnection("127.0.0.1", emulator.port, timeout=5)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    conn.request("GET", f"/api/v1/nodes/{NODE}?resourceVersion=0", headers=headers)
    cached = json.loads(conn.getresponse().read())
    conn.request("GET", f"/api/v1/nodes/{NODE}", headers=headers)
    fresh = json.loads(conn.getresponse().read())
    assert (cached["metadata"]["labels"], fresh["metadata"]["labels"]) == ({"a": "1"}, {"a": "2"})
    assert int(fresh["metadata"]["resourceVersion"]) > int(cached["metadata"]["resourceVersion"])


def test_strategic_merge_patch_adds_and_deletes_with_null(
    emulator: ApiServerEmulator, api: Any
) -> None:
    before = emulator.node(NODE)["metadata"]["resourceVersion"]
    api.patch_node(
        NODE, {"metadata": {"labels": {"b": "2", "a": None, "absent": None}}}, _request_timeout=5
    )
    assert emulator.node_labels(NODE) == {"b": "2"}
    assert emulator.node_annotations(NODE) == {"keep": "me"}
    assert emulator.requests[-1].content_type == "application/strategic-merge-patch+json"
    assert int(emulator.node(NODE)["metadata"]["resourceVersion"]) > int(before)


def test_strategic_merge_merges_taints_by_key(emulator: ApiServerEmulator, api: Any) -> None:
    api.patch_node(NODE, {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})
    api.patch_node(
        NODE,
        {
            "spec": {
                "taints": [
                    {"key": "y", "effect": "NoSchedule"},
                    {"key": "x", "effect": "NoExecute"},
                ]
            }
        },
    )
    taints = emulator.node(NODE)["spec"]["taints"]
    assert taints == [{"key": "x", "effect": "NoExecute"}, {"key": "y", "effect": "NoSchedule"}]
    with pytest.raises(ApiException) as raised:
        api.patch_node(NODE, {"metadata": {"labels": {"$patch": "replace"}}})
    assert raised.value.status == 400


def test_merge_patch_replaces_lists(emulator: ApiServerEmulator, api: Any) -> None:
    api.patch_node(NODE, {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})
    raw_patch(
        api,
        {"spec": {"taints": [{"key": "y", "effect": "NoSchedule"}]}},
        "application/merge-patch+json",
    )
    assert emulator.node(NODE)["spec"]["taints"] == [{"key": "y", "effect": "NoSchedule"}]


def test_json_patch_escaping_test_and_remove(emulator: ApiServerEmulator, api: Any) -> None:
    api.patch_node(
        NODE,
        [
            {"op": "add", "path": "/metadata/labels/nvidia.com~1gpu.count", "value": "8"},
            {"op": "add", "path": "/spec/x~0y", "value": "tilde"},
        ],
    )
    assert emulator.node_labels(NODE) == {"a": "1", "nvidia.com/gpu.count": "8"}
    assert emulator.node(NODE)["spec"]["x~y"] == "tilde"
    revision = emulator.revision
    for failing in (
        [
            {"op": "remove", "path": "/metadata/labels/nvidia.com~1gpu.count"},
            {"op": "remove", "path": "/metadata/labels/absent"},
        ],
        [
            {"op": "test", "path": "/metadata/labels/a", "value": "other"},
            {"op": "remove", "path": "/metadata/labels/a"},
        ],
    ):
        with pytest.raises(ApiException) as raised:
            api.patch_node(NODE, failing)
        assert raised.value.status == 422
    with pytest.raises(ApiException) as raised:
        api.patch_node(NODE, [{"op": "remove"}])
    assert raised.value.status == 400
    assert emulator.revision == revision
    assert emulator.node_labels(NODE) == {"a": "1", "nvidia.com/gpu.count": "8"}


def test_resource_version_precondition(emulator: ApiServerEmulator, api: Any) -> None:
    current = emulator.node(NODE)["metadata"]["resourceVersion"]
    emulator.change_node_metadata(NODE, labels={"other": "writer"})
    with pytest.raises(ApiException) as raised:
        raw_patch(
            api,
            {"metadata": {"resourceVersion": current, "labels": {"a": None}}},
            "application/merge-patch+json",
        )
    assert raised.value.status == 409
    assert status_of(raised.value)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(raised.value)["message"]
    fresh = emulator.node(NODE)["metadata"]["resourceVersion"]
    raw_patch(
        api,
        {"metadata": {"resourceVersion": fresh, "labels": {"a": None}}},
        "application/merge-patch+json",
    )
    assert emulator.node_labels(NODE) == {"other": "writer"}


def test_noop_patch_keeps_the_resource_version(emulator: ApiServerEmulator, api: Any) -> None:
    revision = emulator.revision
    raw_patch(api, {"metadata": {"labels": {"a": "1"}}}, "application/merge-patch+json")
    assert emulator.revision == revision


@pytest.mark.parametrize(
    ("labels", "field_value"),
    [
        ({"ok": "fine", "bad key": "v"}, "bad key"),
        ({"nvidia.com/gpu.compute.major": "-1"}, "-1"),
        ({"x" * 64: "v"}, "x" * 64),
        ({"UPPER.example/k": "v"}, "UPPER.example/k"),
        ({"a/b/c": "v"}, "a/b/c"),
        ({"k": "v" * 64}, "v" * 64),
    ],
    ids=["space", "leading-dash", "long-name", "uppercase-prefix", "two-slashes", "long-value"],
)
def test_invalid_labels_reject_the_whole_patch(
    emulator: ApiServerEmulator, api: Any, labels: dict[str, str], field_value: str
) -> None:
    revision = emulator.revision
    with pytest.raises(ApiException) as raised:
        api.patch_node(NODE, {"metadata": {"labels": {**labels, "added": "x"}}})
    status = status_of(raised.value)
    assert (raised.value.status, status["reason"]) == (422, "Invalid")
    assert any(field_value in cause["message"] for cause in status["details"]["causes"])
    assert emulator.node_labels(NODE) == {"a": "1"}
    assert emulator.revision == revision


def test_annotation_size_limit(emulator: ApiServerEmulator, api: Any) -> None:
    raw_patch(
        api, {"metadata": {"annotations": {"big": "x" * 200_000}}}, "application/merge-patch+json"
    )
    with pytest.raises(ApiException) as raised:
        raw_patch(
            api,
            {"metadata": {"annotations": {"bigger": "x" * 70_000}}},
            "application/merge-patch+json",
        )
    assert raised.value.status == 422
    assert "262144 bytes" in status_of(raised.value)["message"]


def test_unsupported_patch_type_is_415(emulator: ApiServerEmulator, api: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", emulator.port, timeout=5)
    conn.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        body=b"{}",
        headers={
            "Authorization": f"Bearer {ADMIN}",
            "Content-Type": "application/apply-patch+yaml",
        },
    )
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())["reason"]) == (415, "UnsupportedMediaType")


def test_authentication_and_authorisation(emulator: ApiServerEmulator) -> None:
    emulator.set_token(
        "reader", Principal("system:serviceaccount:ns:reader", frozenset({("get", "nodes")}))
    )
    conn = http.client.HTTPConnection("127.0.0.1", emulator.port, timeout=5)
    conn.request("GET", f"/api/v1/nodes/{NODE}", headers={"Authorization": "Bearer wrong"})
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())["reason"]) == (401, "Unauthorized")
    conn.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        body=b"{}",
        headers={"Authorization": "Bearer reader", "Content-Type": "application/merge-patch+json"},
    )
    response = conn.getresponse()
    body = json.loads(response.read())
    assert response.status == 403
    assert body["message"] == (
        'nodes "n1" is forbidden: User "system:serviceaccount:ns:reader" cannot patch resource '
        '"nodes" in API group "" at the cluster scope'
    )


def test_nodefeature_crud(emulator: ApiServerEmulator, api: Any) -> None:
    custom: Any = k8s.CustomObjectsApi(api.api_client)
    group, version, plural = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures"
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "NodeFeature",
        "metadata": {"name": "nf"},
        "spec": {"labels": {"a": "1"}},
    }
    created = custom.create_namespaced_custom_object(group, version, "ns", plural, body)
    assert created["metadata"]["namespace"] == "ns"
    assert created["metadata"]["generation"] == 1
    with pytest.raises(ApiException) as raised:
        custom.create_namespaced_custom_object(group, version, "ns", plural, body)
    assert (raised.value.status, status_of(raised.value)["reason"]) == (409, "AlreadyExists")

    unconditional = {**created, "metadata": {"name": "nf"}, "spec": {"labels": {}}}
    with pytest.raises(ApiException) as raised:
        custom.replace_namespaced_custom_object(group, version, "ns", plural, "nf", unconditional)
    assert raised.value.status == 422
    stale = {**created, "metadata": {**created["metadata"], "resourceVersion": "1"}}
    with pytest.raises(ApiException) as raised:
        custom.replace_namespaced_custom_object(group, version, "ns", plural, "nf", stale)
    assert raised.value.status == 409
    updated = {**created, "spec": {"labels": {"b": "2"}}}
    replaced = custom.replace_namespaced_custom_object(group, version, "ns", plural, "nf", updated)
    assert replaced["metadata"]["generation"] == 2
    merged = custom.patch_namespaced_custom_object(
        group,
        version,
        "ns",
        plural,
        "nf",
        {"spec": {"labels": {"c": "3"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged["spec"]["labels"] == {"b": "2", "c": "3"}
    listed = custom.list_namespaced_custom_object(group, version, "ns", plural)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["nf"]
    assert custom.list_namespaced_custom_object(group, version, "other", plural)["items"] == []
    custom.delete_namespaced_custom_object(group, version, "ns", plural, "nf")
    assert emulator.nodefeature("ns", "nf") is None
    with pytest.raises(ApiException) as raised:
        custom.get_namespaced_custom_object(group, version, "ns", plural, "nf")
    assert raised.value.status == 404


def test_pods_and_controllers_for_owner_references(emulator: ApiServerEmulator, api: Any) -> None:
    daemonset = emulator.add_daemonset("ns", "gfd")
    emulator.add_replicaset("ns", "rs")
    emulator.add_pod("ns", "gfd-x", controller=daemonset)
    pod = api.read_namespaced_pod("gfd-x", "ns")
    (owner,) = pod.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("DaemonSet", "gfd", daemonset["metadata"]["uid"])
    apps: Any = k8s.AppsV1Api(api.api_client)
    assert apps.read_namespaced_daemon_set("gfd", "ns").metadata.uid == daemonset["metadata"]["uid"]
    assert apps.read_namespaced_replica_set("rs", "ns").metadata.name == "rs"


def test_faults_and_request_log(emulator: ApiServerEmulator, api: Any) -> None:
    emulator.inject(Fault(status=503), Fault(status=429, retry_after="7"))
    for status in (503, 429):
        with pytest.raises(ApiException) as raised:
            api.read_node(NODE)
        assert raised.value.status == status
    headers = raised.value.headers
    assert headers is not None and headers["Retry-After"] == "7"
    assert status_of(raised.value)["details"]["retryAfterSeconds"] == 7
    emulator.inject(Fault(drop=True))
    with pytest.raises(urllib3.exceptions.ProtocolError):
        api.read_node(NODE)
    emulator.inject(Fault(delay=1.0))
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        api.read_node(NODE, _request_timeout=0.2)
    api.read_node(NODE)
    log = emulator.requests
    assert [(r.method, r.status, r.fault) for r in log[:3]] == [
        ("GET", 503, "status 503"),
        ("GET", 429, "status 429"),
        ("GET", 200, "drop"),
    ]
    assert all(r.path == f"/api/v1/nodes/{NODE}" for r in log)
    assert emulator.count(writes=False) == len(log)


def test_unknown_paths_and_methods(emulator: ApiServerEmulator, api: Any, tmp_path: Path) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", emulator.port, timeout=5)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    conn.request("GET", "/api/v1/secrets", headers=headers)
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())["reason"]) == (404, "NotFound")
    conn.request("DELETE", f"/api/v1/nodes/{NODE}", headers=headers)
    response = conn.getresponse()
    response.read()
    assert response.status == 405
