"""API-server fixtures shared by the Kubernetes sink tests and the reliability suite.

A conftest imports the fixtures it wants from here; ``node_labels`` and
``request_timeout`` are the knobs a suite overrides (the reliability suite seeds
foreign labels and uses a shorter timeout).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gfd.kube_api import KubeClient, RetryPolicy, connect_kubernetes
from tests.emulator import ApiServerEmulator, seed_gfd_cluster

NODE = "gpu-node-1"
NAMESPACE = "gpu-operator"
POD = "gfd-abcde"
TOKEN = "gfd-token"

#: Quick retries so that storms of faults take milliseconds, not minutes.
FAST_RETRIES = RetryPolicy(initial_delay=0.01, max_delay=0.05, deadline=5.0, max_retry_after=2.0)


@pytest.fixture
def emulator() -> Iterator[ApiServerEmulator]:
    with ApiServerEmulator() as api:
        yield api


@pytest.fixture
def node_labels() -> Mapping[str, str]:
    """Labels the node carries before gfd runs."""
    return {}


@pytest.fixture
def request_timeout() -> float:
    return 1.0


@pytest.fixture
def cluster(emulator: ApiServerEmulator, node_labels: Mapping[str, str]) -> dict[str, Any]:
    return seed_gfd_cluster(
        emulator,
        node_name=NODE,
        namespace=NAMESPACE,
        token=TOKEN,
        pod_name=POD,
        node_labels=node_labels or None,
    )


@pytest.fixture
def kubeconfig(emulator: ApiServerEmulator, tmp_path: Path) -> Path:
    return emulator.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)


@pytest.fixture
def client(
    kubeconfig: Path, cluster: dict[str, Any], request_timeout: float
) -> Iterator[KubeClient]:
    kube = connect_kubernetes(
        kubeconfig=str(kubeconfig), request_timeout=request_timeout, retry_policy=FAST_RETRIES
    )
    yield kube
    kube.close()


@pytest.fixture
def stop() -> threading.Event:
    return threading.Event()
