"""API-server fixtures shared by the Kubernetes sink tests and the reliability suite.

A conftest imports the fixtures it wants from here; ``node_labels`` and
``request_timeout`` are the knobs a suite overrides (the reliability suite seeds
foreign labels and uses a shorter timeout).
"""

from __future__ import annotations

import shutil
import subprocess
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


def self_signed_certificate(cert: Path, key: Path, name: str, *extensions: str) -> None:
    """Write a one-day self-signed EC certificate for ``CN=name`` (with ``-addext`` extras)."""
    extra = [word for ext in extensions for word in ("-addext", ext)]
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            *extra,
        ],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="session")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a certificate for the TLS emulator")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "ca.crt", directory / "tls.key"
    self_signed_certificate(cert, key, "emulator", "subjectAltName=IP:127.0.0.1")
    return cert, key
