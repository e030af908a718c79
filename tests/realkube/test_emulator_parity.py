"""The API server emulator held against the real kube-apiserver: what the emulator keeps
(besides the faults only it can inject) must behave as the real server does. The same
requests, as gfd's ServiceAccount, go to both; their answers must agree in status,
reason, details and message.

Without a real server (``KUBEBUILDER_ASSETS`` unset) this suite skips and CI holds the
emulator to the recorded answers instead (``tests/emulator/test_recorded_answers.py``,
whose script covers every request shape here and more)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deploy.manifests import NAMESPACE
from tests.emulator import ApiServerEmulator, seed_gfd_cluster
from tests.realkube.cluster import GfdCluster, GfdPod

pytestmark = pytest.mark.oracle("kube")

MERGE = "application/merge-patch+json"
FEATURES = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{namespace}/nodefeatures"


class Twin:
    """One node seen through both servers, under the same name, as gfd's account."""

    def __init__(self, kube: GfdCluster, pod: GfdPod, emulator: ApiServerEmulator) -> None:
        self.kube = kube
        self.pod = pod
        self.emulator = emulator
        self.node = pod.node
        seed_gfd_cluster(emulator, node_name=self.node, namespace=NAMESPACE, token="gfd-token")
        self._emulated = emulator_client(emulator)

    def both(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[tuple[int, Any], tuple[int, Any]]:
        real = self.kube.as_gfd(self.pod, method, path, body, content_type=content_type)
        emulated = self._emulated(method, path, body, content_type)
        return real, emulated


def emulator_client(emulator: ApiServerEmulator) -> Any:
    import json
    import urllib.error
    import urllib.request

    def send(method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(emulator.url + path, data=data, method=method)
        request.add_header("Authorization", "Bearer gfd-token")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    return send


@pytest.fixture
def twin(kube: GfdCluster, pod: GfdPod) -> Iterator[Twin]:
    with ApiServerEmulator() as emulator:
        yield Twin(kube, pod, emulator)


def shape(reply: tuple[int, Any]) -> tuple[int, str, dict[str, Any], str]:
    status, body = reply
    return status, body.get("reason", ""), body.get("details", {}), body.get("message", "")


def test_not_found(twin: Twin) -> None:
    real, emulated = twin.both("GET", "/api/v1/nodes/no-such-node")
    assert shape(emulated) == shape(real)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_rbac_is_namespaced(twin: Twin, method: str) -> None:
    # gfd's Role is in its own namespace: the same request in "default" is refused.
    name = f"nvidia-features-for-{twin.node}"
    path = FEATURES.format(namespace="default")
    body = None
    if method == "GET":
        path += f"/{name}"
    else:
        body = {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {"name": name},
            "spec": {"labels": {}},
        }
    real, emulated = twin.both(method, path, body)
    assert real[0] == 403
    assert shape(emulated) == shape(real)


def test_conflict_on_a_stale_resource_version(twin: Twin) -> None:
    path = f"/api/v1/nodes/{twin.node}"
    stale = {
        "real": twin.kube.node_metadata(twin.node)["resourceVersion"],
        "emulated": twin.emulator.node(twin.node)["metadata"]["resourceVersion"],
    }
    change = {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}
    twin.both("PATCH", path, change, MERGE)
    real = twin.kube.as_gfd(
        twin.pod, "PATCH", path,
        {"metadata": {"resourceVersion": stale["real"], "labels": {"nvidia.com/gpu.count": "4"}}},
        content_type=MERGE,
    )  # fmt: skip
    emulated = emulator_client(twin.emulator)(
        "PATCH", path,
        {"metadata": {"resourceVersion": stale["emulated"], "labels": {"nvidia.com/gpu.count": "4"}}},
        MERGE,
    )  # fmt: skip
    assert real[0] == 409
    assert shape(emulated) == shape(real)


def test_invalid_label_value(twin: Twin) -> None:
    real, emulated = twin.both(
        "PATCH",
        f"/api/v1/nodes/{twin.node}",
        {"metadata": {"labels": {"nvidia.com/gpu.product": "not valid!"}}},
        MERGE,
    )
    assert real[0] == 422
    (rs, rr, rd, rm), (es, er, ed, em) = shape(real), shape(emulated)
    assert (es, er, ed.get("kind"), ed.get("name")) == (rs, rr, rd.get("kind"), rd.get("name"))
    # The summary line names the object, the field and the value as the real server does.
    prefix = re.escape(
        f'Node "{twin.node}" is invalid: metadata.labels: Invalid value: "not valid!": '
    )
    assert re.match(prefix, rm) and re.match(prefix, em), (rm, em)
    assert {c["field"] for c in ed["causes"]} == {c["field"] for c in rd["causes"]}
