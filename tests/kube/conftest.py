"""Fixtures: a running API server emulator, gfd's cluster objects in it, a client; and
``api``/``api_client``, the same over both servers a sink test can run against (the
project's emulator and kmock, see :mod:`tests.kube.servers`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gfd.kube_api import KubeClient, connect_kubernetes
from tests.kube.servers import ApiServer, EmulatorServer, KmockServer
from tests.kube_fixtures import (  # noqa: F401 - fixtures are registered by import
    FAST_RETRIES,
    NAMESPACE,
    NODE,
    POD,
    TOKEN,
    client,
    cluster,
    emulator,
    kubeconfig,
    node_labels,
    request_timeout,
    stop,
    tls_pair,
)
from tests.oracles import oracles_required


def kmock_or_skip() -> None:
    """kmock is a registry oracle (PyPI): CI (``GFD_REQUIRE_ORACLES=1``) fails without it,
    a developer's run skips its half of the parametrized tests."""
    try:
        import kmock  # noqa: F401
    except ImportError as exc:
        message = f"oracle kmock (PyPI, an independent Kubernetes API mock) missing: {exc}"
        if oracles_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture(params=["emulator", "kmock"])
def api(request: pytest.FixtureRequest) -> Iterator[ApiServer]:
    if request.param == "emulator":
        yield EmulatorServer(request.getfixturevalue("emulator"))
        return
    kmock_or_skip()
    with KmockServer() as server:
        yield server


@pytest.fixture
def api_cluster(api: ApiServer, request: pytest.FixtureRequest) -> dict[str, Any]:
    labels: Mapping[str, str] = request.getfixturevalue("node_labels")
    return api.seed(node=NODE, namespace=NAMESPACE, pod=POD, token=TOKEN, labels=labels)


@pytest.fixture
def api_client(
    api: ApiServer, api_cluster: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[KubeClient]:
    config = api.write_kubeconfig(tmp_path / "api-kubeconfig", TOKEN)
    kube = connect_kubernetes(
        kubeconfig=str(config),
        request_timeout=request.getfixturevalue("request_timeout"),
        retry_policy=FAST_RETRIES,
    )
    yield kube
    kube.close()
